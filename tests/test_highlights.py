"""Highlights mark the words a query matched, never its stopwords."""

from __future__ import annotations

import asyncpg
import httpx

from app.retrieval.highlights import STOPWORDS, highlight_spans
from app.retrieval.query import parse_query
from tests.conftest import TenantFactory


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


async def test_the_stopwords_are_those_the_keyword_leg_drops(admin_conn: asyncpg.Connection) -> None:
    words = sorted(STOPWORDS)
    kept = await admin_conn.fetch(
        "SELECT w FROM unnest($1::text[]) AS w WHERE to_tsvector('english', w) <> ''::tsvector", words
    )
    assert [row["w"] for row in kept] == []
    # And a word outside the list is kept, so the check above can fail.
    assert await admin_conn.fetchval("SELECT to_tsvector('english', 'user') <> ''::tsvector")


async def test_search_highlights_skip_stopwords(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    content = "What the user eats for breakfast"
    stored = await client.post("/v1/facts", json={"content": content}, headers=tenant.headers())
    assert stored.status_code == 201
    found = await client.post(
        "/v1/search",
        json={"query": "what does the user eat", "mode": "keyword"},
        headers=tenant.headers("reader"),
    )
    [hit] = found.json()["results"]
    assert [content[start:end] for start, end in hit["highlights"]] == ["user", "eats"]
