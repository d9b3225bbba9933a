"""Input rules every door applies: JSON values, metadata, TOML nesting, paths, keys and questions."""

from __future__ import annotations

import pytest

from app.auth import KEY_PATTERN, hash_key, mint_key, parse_bearer
from app.errors import ApiError
from app.ingest.paths import detect_language, is_document, path_terms, validate_relative_path
from app.input_rules import (
    InputRuleError,
    check_json_value,
    check_metadata,
    check_toml_text,
    toml_nesting_depth,
)
from app.rate_limit import RateLimiter, retry_after_header
from app.retrieval.code_questions import parse_research_query

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "value",
    [
        {"a": "nul\x00"},
        {"k\x00": 1},
        ["\ud800"],
        {"x": float("nan")},
        {"x": float("inf")},
    ],
)
def test_values_postgresql_cannot_store_are_refused(value: object) -> None:
    with pytest.raises(InputRuleError):
        check_json_value(value)


def test_nesting_is_bounded_without_recursion() -> None:
    deep: object = 1
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(InputRuleError, match="deeper than 32"):
        check_json_value(deep)


def test_a_plain_value_counts_its_keys() -> None:
    assert check_json_value({"a": {"b": 1, "c": [1, {"d": None}]}}) == 4


def test_metadata_is_returned_unchanged_when_it_keeps_the_rules() -> None:
    assert check_metadata({"speaker": "ana", "n": 1}) == {"speaker": "ana", "n": 1}
    with pytest.raises(InputRuleError):
        check_metadata({f"k{i}": i for i in range(300)})


def test_toml_nesting_is_measured_before_parsing() -> None:
    assert toml_nesting_depth("a = [[[1]]]") >= 3
    check_toml_text("[butler]\nname = 'x'\n")
    with pytest.raises(InputRuleError):
        check_toml_text("a = " + "[" * 200 + "]" * 200)


@pytest.mark.parametrize(
    "path",
    ["", "/abs.md", "~/x.md", "a/../b.md", "a//b.md", "./a.md", "a\\b.md", "evil\u202egpj.md", "x" * 513],
)
def test_bad_paths_are_a_422(path: str) -> None:
    with pytest.raises(ApiError) as caught:
        validate_relative_path(path)
    assert caught.value.status == 422


def test_paths_name_their_kind_and_terms() -> None:
    assert validate_relative_path("memory/2026-11-20.md") == "memory/2026-11-20.md"
    assert is_document("notes/README.MD") and not is_document("a.swift")
    assert [detect_language(p) for p in ("a.swift", "b.PY", "c.tsx", "d.rs")] == [
        "swift",
        "python",
        "typescript",
        None,
    ]
    assert path_terms("memory/2026-11-20.md") == ["memory", "2026", "11", "20", "md"]


def test_minted_keys_have_the_documented_shape_and_are_stored_hashed() -> None:
    key = mint_key()
    assert KEY_PATTERN.fullmatch(key.plain)
    assert key.key_hash == hash_key(key.plain) != hash_key(mint_key().plain)


@pytest.mark.parametrize(
    ("header", "key"),
    [
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Basic abc", None),
        ("Bearer ", None),
        (None, None),
        ("", None),
    ],
)
def test_bearer_headers(header: str | None, key: str | None) -> None:
    assert parse_bearer(header) == key


def test_the_rate_limiter_allows_a_burst_then_the_average() -> None:
    now = [0.0]
    limiter = RateLimiter(per_second=2.0, burst=3, clock=lambda: now[0])
    assert [limiter.acquire("k") for _ in range(3)] == [None, None, None]
    assert limiter.acquire("k") == pytest.approx(0.5)
    assert limiter.acquire("other") is None  # per key, not per tenant
    now[0] = 0.5
    assert limiter.acquire("k") is None
    assert retry_after_header(0.2) == "1" and retry_after_header(2.1) == "3"


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ("implementations of AuthProtocol", ("implementations", "AuthProtocol")),
        ("what calls login", ("callers", "login")),
        ("who calls login?", ("callers", "login")),
        ("what does start call", ("callees", "start")),
        ("dependencies of module app/core", ("dependencies", "app/core")),
        ("components related to Cache", ("related", "Cache")),
    ],
)
def test_structural_questions_in_words(question: str, answer: tuple[str, str]) -> None:
    assert parse_research_query(question) == answer


def test_an_unreadable_question_says_what_is_understood() -> None:
    with pytest.raises(ApiError) as caught:
        parse_research_query("tell me everything")
    assert caught.value.status == 422 and "what calls X" in caught.value.message
