"""Query parsing, substring patterns, highlight spans and path globs: what no user string can break."""

from __future__ import annotations

import pytest

from app.retrieval.globs import GlobError, glob_to_regex, path_matches
from app.retrieval.highlights import highlight_spans
from app.retrieval.query import cjk_bigrams, ilike_patterns, parse_query, search_text_for

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("What does the USER eat?", ("what", "does", "the", "user", "eat")),
        ("snake_case and  spaces", ("snake", "case", "and", "spaces")),
        ("repeat repeat Repeat", ("repeat",)),
        ("   ", ()),
        ("!!! ???", ()),
        ("café naïve", ("café", "naïve")),
    ],
)
def test_words_are_lowercase_unique_and_split_like_postgresql(text: str, words: tuple[str, ...]) -> None:
    assert parse_query(text).words == words


def test_an_empty_query_is_empty_and_a_cjk_one_is_not() -> None:
    assert parse_query(" ?! ").is_empty
    q = parse_query("数据库")
    assert not q.is_empty
    assert q.cjk_runs == ("数据库",)
    assert q.cjk_bigrams == ("数据", "据库")


def test_a_lone_cjk_character_is_its_own_bigram() -> None:
    assert cjk_bigrams("a 猫 b") == ["猫"]


def test_the_index_text_carries_bigrams_and_extra_terms() -> None:
    assert search_text_for("东京 trip", ["tag1"]) == "东京 trip\n东京\ntag1"


def test_substring_patterns_escape_like_wildcards_and_skip_short_words() -> None:
    assert ilike_patterns(parse_query("100% of a_b go")) == ["%100%"]
    assert ilike_patterns(parse_query("under_score")) == ["%under%", "%score%"]


def test_highlights_find_words_sharing_a_stem() -> None:
    content = "Running is fun; the runner runs daily."
    spans = highlight_spans(content, parse_query("run"))
    assert [content[a:b] for a, b in spans] == ["Running", "runs"]


def test_highlights_of_a_cjk_query_cover_the_run_once() -> None:
    content = "我们的数据库很快"
    spans = highlight_spans(content, parse_query("数据库"))
    assert [content[a:b] for a, b in spans] == ["数据库"]


@pytest.mark.parametrize(
    ("glob", "path", "matches"),
    [
        ("*.swift", "Sources/Auth/Auth.swift", True),
        ("*.swift", "Sources/Auth/Auth.py", False),
        ("Sources/Auth/**", "Sources/Auth/Deep/x.swift", True),
        ("Sources/Auth/**", "Sources/App/x.swift", False),
        ("**/Tests/**", "a/b/Tests/c.py", True),
        ("[ab].py", "src/a.py", True),
        ("[ab].py", "src/c.py", False),
        ("./memory/*.md", "memory/2026-01-01.md", True),
    ],
)
def test_globs_have_gitignore_meaning(glob: str, path: str, matches: bool) -> None:
    assert path_matches(glob_to_regex(glob), path) is matches


@pytest.mark.parametrize("glob", ["", "   ", "# comment", "!negated", "[unclosed"])
def test_what_is_not_a_path_glob_is_refused(glob: str) -> None:
    with pytest.raises(GlobError):
        glob_to_regex(glob)
