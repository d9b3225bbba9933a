"""Highlights mark the words a query matched, never its stopwords."""

from __future__ import annotations

import pytest

from app.retrieval.highlights import highlight_spans
from app.retrieval.query import parse_query

pytestmark = pytest.mark.unit


def _marked(content: str, query: str) -> list[str]:
    return [content[start:end] for start, end in highlight_spans(content, parse_query(query))]


def test_stopwords_of_the_query_are_not_marked() -> None:
    content = "What the user eats: the user avoids dairy"
    assert _marked(content, "what does the user eat") == ["user", "eats", "user"]


def test_a_content_stopword_sharing_a_stem_with_a_query_word_is_not_marked() -> None:
    # "willing" stems to "will", a stopword the keyword leg never matches in the content.
    assert _marked("I will be willing to help", "willing") == ["willing"]


def test_a_query_of_stopwords_only_still_marks_them() -> None:
    assert _marked("The Who played here", "the who") == ["The", "Who"]
