"""Input that cannot be stored or served back is a 4xx at the door and changes nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from app.ingest.code_parser import MAX_CHUNK_CHARS, parse_code
from app.ingest.markdown import chunk_markdown
from app.state import ServiceState
from tests.support import TenantFactory, TenantKeys

JSON_HEADERS = {"Content-Type": "application/json"}


def _nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


async def _count_memories(client: httpx.AsyncClient, tenant: TenantKeys) -> int:
    """Every fact, rule and episode the tenant can find with an all-matching keyword query."""
    found = await client.post(
        "/v1/search",
        json={"query": "poison probe", "mode": "keyword", "min_score": 0, "limit": 100},
        headers=tenant.headers("reader"),
    )
    assert found.status_code == 200, found.text
    return len(found.json()["results"])


async def _raw(
    client: httpx.AsyncClient, tenant: TenantKeys, method: str, path: str, text: str
) -> httpx.Response:
    headers = {**tenant.headers(), **JSON_HEADERS}
    return await client.request(method, path, content=text.encode(), headers=headers)


@pytest.mark.parametrize("endpoint", ["/v1/facts", "/v1/rules"])
async def test_deeply_nested_metadata_is_refused_and_nothing_is_stored(
    client: httpx.AsyncClient, make_tenant: TenantFactory, endpoint: str
) -> None:
    """The poison write: 300 levels used to answer 500 after the commit, then break every search."""
    tenant = await make_tenant()
    ok = await client.post(
        endpoint, json={"content": "poison probe ok", "metadata": _nested(32)}, headers=tenant.headers()
    )
    assert ok.status_code == 201, ok.text
    response = await client.post(
        endpoint, json={"content": "poison probe", "metadata": _nested(300)}, headers=tenant.headers()
    )
    assert response.status_code == 422, response.text
    assert "deeper than" in response.json()["error"]["message"]
    assert await _count_memories(client, tenant) == 1
    # The same metadata is judged the same way inside a batch (it sits deeper in the body there).
    batch = await client.post(
        "/v1/memories:batch",
        json={"items": [{"type": "fact", "content": "poison probe batch", "metadata": _nested(32)}]},
        headers=tenant.headers(),
    )
    assert batch.status_code == 201, batch.text
    too_deep = await client.post(
        "/v1/memories:batch",
        json={"items": [{"type": "fact", "content": "poison probe", "metadata": _nested(33)}]},
        headers=tenant.headers(),
    )
    assert too_deep.status_code == 422
    assert await _count_memories(client, tenant) == 2


async def test_thousand_level_nesting_anywhere_is_a_422(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    """~1,000 levels used to raise RecursionError in the NUL check: a 500."""
    tenant = await make_tenant()
    deep = "[" * 990 + "]" * 990
    for path, text in (
        ("/v1/facts", f'{{"content": "poison probe", "tags": {deep}}}'),
        ("/v1/search", f'{{"query": "x", "filters": {{"metadata": {{"k": {deep}}}}}}}'),
        ("/v1/memories:batch", f'{{"items": {deep}}}'),
    ):
        response = await _raw(client, tenant, "POST", path, text)
        assert response.status_code == 422, (path, response.text)
        assert response.json()["error"]["code"] == "validation_error"
    assert await _count_memories(client, tenant) == 0


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/facts", '{"content": "poison probe", "metadata": {"k": "\\ud800"}}'),
        ("/v1/facts", '{"content": "poison probe", "metadata": {"\\udfff": 1}}'),
        ("/v1/facts", '{"content": "poison probe \\ud83d"}'),
        ("/v1/episodes", '{"content": "poison probe", "butler": "b", "session_id": "\\ud800"}'),
        ("/v1/facts", '{"content": "poison probe", "metadata": {"k": NaN}}'),
        ("/v1/facts", '{"content": "poison probe", "metadata": {"k": [1, Infinity]}}'),
        ("/v1/rules", '{"content": "poison probe", "metadata": {"k": -Infinity}}'),
        ("/v1/search", '{"query": "poison \\ud800"}'),
        ("/v1/search", '{"query": "poison", "filters": {"metadata": {"k": "\\ud800"}}}'),
        ("/v1/search", '{"query": "poison", "filters": {"metadata": {"k": NaN}}}'),
        ("/v1/recall", '{"topic": "poison \\udc00"}'),
    ],
)
async def test_lone_surrogates_and_non_finite_numbers_are_422(
    client: httpx.AsyncClient, make_tenant: TenantFactory, path: str, body: str
) -> None:
    tenant = await make_tenant()
    response = await _raw(client, tenant, "POST", path, body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert "surrogate" in json.dumps(error) or "finite" in json.dumps(error), error
    assert await _count_memories(client, tenant) == 0


async def test_lone_surrogates_in_document_and_code_paths_are_422(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    document = await _raw(client, tenant, "PUT", "/v1/documents", '{"path": "a\\ud800.md", "content": "x"}')
    assert document.status_code == 422, document.text
    code = await _raw(
        client,
        tenant,
        "PUT",
        "/v1/code/files",
        '{"repository": "r", "files": [{"path": "a\\udc00.py", "content": "x = 1"}]}',
    )
    assert code.status_code == 422, code.text
    listed = await client.get("/v1/documents:list", headers=tenant.headers("reader"))
    assert listed.json()["documents"] == []


async def test_metadata_size_and_key_count_are_capped(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    """2 MB of metadata and 20,000 keys used to be stored, bypassing the 64 KiB content limit."""
    tenant = await make_tenant()
    for metadata, words in (
        ({"blob": "m" * 17_000}, "16 KiB"),
        ({f"k{i}": 1 for i in range(300)}, "keys"),
    ):
        response = await client.post(
            "/v1/facts", json={"content": "poison probe", "metadata": metadata}, headers=tenant.headers()
        )
        assert response.status_code == 422, response.text
        assert words in response.json()["error"]["message"]
    fits = await client.post(
        "/v1/facts",
        json={"content": "poison probe", "metadata": {"blob": "m" * 15_000, "n": [1, 2.5, None, True]}},
        headers=tenant.headers(),
    )
    assert fits.status_code == 201, fits.text
    assert fits.json()["metadata"]["n"] == [1, 2.5, None, True]


async def test_episode_expiring_in_the_past_is_refused(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    """It used to be stored with 201 and then be a 404 for its own id."""
    tenant = await make_tenant()
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    response = await client.post(
        "/v1/episodes",
        json={"content": "poison probe", "butler": "b", "expires_at": past},
        headers=tenant.headers(),
    )
    assert response.status_code == 422
    assert "future" in response.json()["error"]["message"]
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    stored = await client.post(
        "/v1/episodes",
        json={"content": "poison probe", "butler": "b", "expires_at": future},
        headers=tenant.headers(),
    )
    assert stored.status_code == 201
    got = await client.get(f"/v1/memories/{stored.json()['id']}", headers=tenant.headers("reader"))
    assert got.status_code == 200


async def test_scope_settings_empty_put_is_refused_and_deep_toml_is_a_422(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    url = "/v1/scopes/health/settings"
    stored = await client.put(url, json={"half_life_days": 12}, headers=tenant.headers("admin"))
    assert stored.status_code == 200
    for content_type, body in (
        ("application/json", b""),
        ("application/toml", b"  \n"),
        ("application/toml", b'[butler]\nname = "health"\n'),  # no retrieval table: would reset all
        ("application/toml", b"[butler]\nx = " + b"[" * 5000 + b"]" * 5000),
        ("application/toml", b"[butler]\nx = " + b"{a = " * 200 + b"1" + b"}" * 200),
        ("application/toml", b"[butler]\n" + b'x = "' + b"a" * 70_000 + b'"\n'),
    ):
        response = await client.put(
            url, content=body, headers={**tenant.headers("admin"), "Content-Type": content_type}
        )
        assert response.status_code == 422, (body[:40], response.text)
    kept = await client.get(url, headers=tenant.headers("reader"))
    assert kept.json() == {"half_life_days": 12}
    cleared = await client.put(url, json={}, headers=tenant.headers("admin"))
    assert cleared.status_code == 200
    assert (await client.get(url, headers=tenant.headers("reader"))).json() == {}


@pytest.mark.parametrize("bad", ["notes.md/", "notes\u202egpj.md", "no\u200btes.md", "a\u2028b.md"])
async def test_trailing_slash_and_invisible_characters_in_paths_are_refused(
    client: httpx.AsyncClient, make_tenant: TenantFactory, bad: str
) -> None:
    """`notes.md/` used to silently replace notes.md; U+202E makes a path display as another."""
    tenant = await make_tenant()
    original = await client.put(
        "/v1/documents", json={"path": "notes.md", "content": "original"}, headers=tenant.headers()
    )
    assert original.status_code == 200
    response = await client.put(
        "/v1/documents", json={"path": bad, "content": "replacement"}, headers=tenant.headers()
    )
    assert response.status_code == 422, response.text
    code = await client.put(
        "/v1/code/files",
        json={"repository": "r", "files": [{"path": bad.replace(".md", ".py"), "content": "x = 1"}]},
        headers=tenant.headers(),
    )
    assert code.status_code == 422, code.text
    kept = await client.get("/v1/documents", params={"path": "notes.md"}, headers=tenant.headers("reader"))
    assert kept.json()["content"] == "original"


async def test_mcp_arguments_follow_the_same_rules(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    message = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "memory_store_fact", '
        '"arguments": {"content": "poison probe", "metadata": {"k": "\\ud800", "n": NaN}}}}'
    )
    response = await client.post(
        "/mcp",
        content=message.encode(),
        headers={
            **tenant.headers(),
            **JSON_HEADERS,
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18",
        },
    )
    assert response.status_code < 500, response.text
    assert await _count_memories(client, tenant) == 0


async def test_a_one_mib_line_becomes_bounded_chunks_not_a_500(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    service: ServiceState,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A minified 1 MiB line was one chunk whose tsvector passed PostgreSQL's 1 MB limit: a 500."""
    # Not about semantics: without an embedder the ~650 chunks are stored in seconds, not minutes.
    monkeypatch.setattr(service, "embedder", None)
    tenant = await make_tenant()
    # ~1 MiB on one line. Few distinct words keep this test's keyword postings small; with distinct
    # words the one chunk's tsvector also passed PostgreSQL's 1 MB limit, which is where the 500 was.
    words = ["alpha", "beta", "gamma", "delta"] * 52_000
    words[100_000] = "needlepoint"
    line = " ".join(words)
    document = await client.put(
        "/v1/documents",
        json={"path": "minified.md", "content": f"# Notes\n{line}\nlast line"},
        headers=tenant.headers(),
    )
    assert document.status_code == 200, document.text
    assert document.json()["chunks"] >= len(line) // 1600
    found = await client.post(
        "/v1/search",
        json={"query": "needlepoint", "mode": "keyword", "types": ["document"]},
        headers=tenant.headers("reader"),
    )
    hits = found.json()["results"]
    assert hits and hits[0]["start_line"] == hits[0]["end_line"] == 2
    assert all(len(hit["content"]) <= 1600 for hit in hits)
    code = await client.put(
        "/v1/code/files",
        json={"repository": "r", "files": [{"path": "app.min.js", "content": "var a=1;" * 25_000}]},
        headers=tenant.headers(),
    )
    assert code.status_code == 200, code.text
    assert code.json()["chunks"] >= 25


def test_chunkers_keep_line_numbers_when_they_cut_a_line() -> None:
    chunks = chunk_markdown("# T\n\nshort line\n" + "w" * 5000 + "\nafter line")
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 3), (4, 4), (4, 4), (4, 4), (4, 5)]
    assert "".join(c.content for c in chunks[1:4]) + chunks[4].content.split("\n")[0] == "w" * 5000
    pieces = parse_code("a.py", "def f():\n    return '" + "z" * 20_000 + "'\n")
    assert max(len(p.content) for p in pieces) <= MAX_CHUNK_CHARS
    assert {(p.start_line, p.symbol) for p in pieces} >= {(1, "f"), (2, "f")}
