"""Markdown memory files: chunks, temporal decay, incremental re-embedding, slices, isolation."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from app.embeddings.base import Vector
from app.infra.config import Settings
from app.state import ServiceState
from tests.support import TenantFactory, TenantKeys, search

BODY = "# Notes\n\nThe heron nests by the old mill pond every spring.\n"


async def _put(client: httpx.AsyncClient, tenant: TenantKeys, path: str, content: str) -> dict[str, Any]:
    response = await client.put(
        "/v1/documents", json={"path": path, "content": content}, headers=tenant.headers()
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def _search(
    client: httpx.AsyncClient, tenant: TenantKeys, query: str, **extra: Any
) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = (
        await search(client, tenant, **{"query": query, "min_score": 0, **extra})
    )["results"]
    return results


def _long_document(sections: int = 8, changed: int | None = None) -> str:
    parts = []
    for s in range(sections):
        parts.append(f"## Section {s}")
        for line in range(12):
            word = "CHANGED" if s == changed and line == 5 else "steady"
            parts.append(f"Entry {s}.{line}: the {word} log of garden work, watering and pruning the roses.")
        parts.append("")
    return "\n".join(parts)


async def test_dated_files_decay_and_memory_md_does_not(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    month_ago = (datetime.now(UTC) - timedelta(days=30)).date().isoformat()
    await _put(client, tenant, "MEMORY.md", BODY)
    await _put(client, tenant, f"memory/{month_ago}.md", BODY)
    results = await _search(client, tenant, "heron nests mill pond", types=["document"])
    by_path = {r["path"]: r for r in results}
    evergreen = by_path["MEMORY.md"]
    dated = by_path[f"memory/{month_ago}.md"]
    assert evergreen["score_breakdown"]["decay"] == 1.0
    assert evergreen["score"] == evergreen["score_breakdown"]["fused"]
    # Half the fused score (the two files' fused scores differ a little: their paths are
    # keyword terms too, so their BM25 lengths differ).
    assert abs(dated["score"] - 0.5 * dated["score_breakdown"]["fused"]) < 1e-5
    assert abs(dated["score_breakdown"]["decay"] - 0.5) < 1e-6
    assert evergreen["type"] == "document"
    assert (evergreen["start_line"], evergreen["end_line"]) == (1, 3)
    quicker = await _search(client, tenant, "heron nests mill pond", types=["document"], half_life_days=15)
    assert (
        abs({r["path"]: r for r in quicker}[f"memory/{month_ago}.md"]["score_breakdown"]["decay"] - 0.25)
        < 1e-6
    )
    # The same half-life from the scope's settings instead of the request.
    put = await client.put(
        "/v1/scopes/diary/settings", json={"half_life_days": 15}, headers=tenant.headers("admin")
    )
    assert put.status_code == 200
    scoped = await _search(client, tenant, "heron nests mill pond", types=["document"], scope="diary")
    decays = {r["path"]: r["score_breakdown"]["decay"] for r in scoped}
    assert decays["MEMORY.md"] == 1.0
    assert abs(decays[f"memory/{month_ago}.md"] - 0.25) < 1e-6


async def test_reupload_embeds_only_what_changed(
    client: httpx.AsyncClient, make_tenant: TenantFactory, service: ServiceState
) -> None:
    tenant = await make_tenant()
    assert service.embedder is not None
    original = _long_document()
    first = await _put(client, tenant, "journal/garden.md", original)
    assert first["chunks"] >= 4 and first["embedded"] == first["chunks"]
    before = service.embedder.document_texts_embedded
    same = await _put(client, tenant, "journal/garden.md", original)
    assert same == {"path": "journal/garden.md", "chunks": first["chunks"], "embedded": 0, "unchanged": True}
    assert service.embedder.document_texts_embedded == before
    edited = await _put(client, tenant, "journal/garden.md", _long_document(changed=3))
    assert 1 <= edited["embedded"] <= 2 < edited["chunks"]
    assert service.embedder.document_texts_embedded == before + edited["embedded"]
    hits = await _search(client, tenant, "CHANGED", mode="keyword")
    assert len(hits) == 1
    lines = _long_document(changed=3).split("\n")
    hit = hits[0]
    assert hit["content"] == "\n".join(lines[hit["start_line"] - 1 : hit["end_line"]])
    assert "CHANGED" in lines[hit["start_line"] - 1 : hit["end_line"]][6]


async def test_slices_return_exact_lines(client: httpx.AsyncClient, make_tenant: TenantFactory) -> None:
    tenant = await make_tenant()
    text = "\n".join(f"line {i}" for i in range(1, 21))
    await _put(client, tenant, "memory/2026-11-20.md", text)
    part = await client.get(
        "/v1/documents",
        params={"path": "memory/2026-11-20.md", "from": 3, "lines": 2},
        headers=tenant.headers(),
    )
    assert part.status_code == 200
    assert part.json()["content"] == "line 3\nline 4"
    assert (part.json()["from"], part.json()["to"], part.json()["total_lines"]) == (3, 4, 20)
    whole = await client.get(
        "/v1/documents", params={"path": "memory/2026-11-20.md"}, headers=tenant.headers()
    )
    assert whole.json()["content"] == text
    missing = await client.get("/v1/documents", params={"path": "memory/nope.md"}, headers=tenant.headers())
    assert missing.status_code == 404
    past_end = await client.get(
        "/v1/documents", params={"path": "memory/2026-11-20.md", "from": 99}, headers=tenant.headers()
    )
    assert past_end.status_code == 422


async def test_a_final_newline_ends_the_last_line_and_starts_none(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    text = "".join(f"line {i}\n" for i in range(1, 6))  # five lines, as `wc -l` counts them
    await _put(client, tenant, "notes/five.md", text)
    whole = await client.get("/v1/documents", params={"path": "notes/five.md"}, headers=tenant.headers())
    assert (whole.json()["from"], whole.json()["to"], whole.json()["total_lines"]) == (1, 5, 5)
    assert whole.json()["content"] == text
    tail = await client.get(
        "/v1/documents", params={"path": "notes/five.md", "from": 5}, headers=tenant.headers()
    )
    assert (tail.json()["content"], tail.json()["to"]) == ("line 5\n", 5)
    last = await client.get(
        "/v1/documents", params={"path": "notes/five.md", "from": 5, "lines": 1}, headers=tenant.headers()
    )
    assert (last.json()["content"], last.json()["to"]) == ("line 5", 5)
    past_end = await client.get(
        "/v1/documents", params={"path": "notes/five.md", "from": 6}, headers=tenant.headers()
    )
    assert past_end.status_code == 422
    assert past_end.json()["error"]["message"] == "from=6 is past the end of the file (5 lines)"


async def test_bad_paths_are_422(client: httpx.AsyncClient, make_tenant: TenantFactory) -> None:
    tenant = await make_tenant()
    for path in (
        "../secrets.md",
        "/etc/passwd.md",
        "a/../../b.md",
        "notes/./x.md",
        "run.exe",
        "a\\b.md",
        "",
        "x" * 600,
    ):
        response = await client.put(
            "/v1/documents", json={"path": path, "content": "x"}, headers=tenant.headers()
        )
        assert response.status_code == 422, path
        assert response.json()["error"]["code"] == "validation_error"
    listing = await client.get("/v1/documents:list", headers=tenant.headers())
    assert listing.json() == {"documents": []}


async def test_documents_are_tenant_isolated_and_deletable(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    a = await make_tenant("a")
    b = await make_tenant("b")
    await _put(client, a, "MEMORY.md", BODY)
    assert (
        await client.get("/v1/documents", params={"path": "MEMORY.md"}, headers=b.headers())
    ).status_code == 404
    assert await _search(client, b, "heron") == []
    assert (
        await client.delete("/v1/documents", params={"path": "MEMORY.md"}, headers=b.headers())
    ).status_code == 404
    assert (
        await client.delete("/v1/documents", params={"path": "MEMORY.md"}, headers=a.headers())
    ).status_code == 204
    assert await _search(client, a, "heron") == []
    assert (
        await client.get("/v1/documents", params={"path": "MEMORY.md"}, headers=a.headers())
    ).status_code == 404


async def test_uploads_waiting_for_the_embedder_hold_no_connection(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    service: ServiceState,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As many big uploads as the pool has connections, all embedding: another tenant still searches."""
    uploader, other = await make_tenant(), await make_tenant()
    await _put(client, other, "notes.md", BODY)
    assert service.embedder is not None
    real = service.embedder.embed_documents
    entered, release = asyncio.Semaphore(0), asyncio.Event()

    # Stands in for a slow model: each upload's embedding waits until the test lets it go.
    async def slow(texts: Sequence[str]) -> list[Vector]:
        entered.release()
        await release.wait()
        return await real(texts)

    monkeypatch.setattr(service.embedder, "embed_documents", slow)
    uploads = [
        asyncio.create_task(
            client.put(
                "/v1/documents",
                json={"path": f"big/{i}.md", "content": _long_document()},
                headers=uploader.headers(),
            )
        )
        for i in range(settings.pool_max_size)
    ]
    try:
        for _ in uploads:
            await asyncio.wait_for(entered.acquire(), timeout=30)
        search = client.post(
            "/v1/search", json={"query": "heron", "mode": "keyword"}, headers=other.headers("reader")
        )
        response = await asyncio.wait_for(search, timeout=10)
        assert response.status_code == 200, response.text
        assert [r["path"] for r in response.json()["results"]] == ["notes.md"]
    finally:
        release.set()
        done = await asyncio.gather(*uploads)
    assert [r.status_code for r in done] == [200] * len(uploads)
    listed = await client.get("/v1/documents:list", headers=uploader.headers("reader"))
    assert sorted(d["path"] for d in listed.json()["documents"]) == sorted(
        f"big/{i}.md" for i in range(len(uploads))
    )


async def test_an_upload_racing_another_keeps_every_chunk_embedded(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    service: ServiceState,
    admin_conn: asyncpg.Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A re-upload that commits while another embeds: the last writer's chunks all have vectors."""
    tenant = await make_tenant()
    path = "journal/race.md"
    await _put(client, tenant, path, _long_document())
    assert service.embedder is not None
    real = service.embedder.embed_documents
    entered, release = asyncio.Event(), asyncio.Event()

    # Holds only the upload that changed section 2; the other upload embeds at once.
    async def gated(texts: Sequence[str]) -> list[Vector]:
        if any("CHANGED" in text for text in texts) and not release.is_set():
            entered.set()
            await release.wait()
        return await real(texts)

    monkeypatch.setattr(service.embedder, "embed_documents", gated)
    slow = asyncio.create_task(_put(client, tenant, path, _long_document(changed=2)))
    await asyncio.wait_for(entered.wait(), timeout=30)
    # Meanwhile the file becomes a different one: the slow upload's snapshot is now stale.
    await _put(client, tenant, path, _long_document(sections=3))
    release.set()
    await slow
    expected = _long_document(changed=2)
    read = await client.get("/v1/documents", params={"path": path}, headers=tenant.headers("reader"))
    assert read.json()["content"] == expected
    rows = await admin_conn.fetch(
        "SELECT content, start_line, end_line, embedding IS NOT NULL AS embedded FROM memory "
        "WHERE tenant_id = $1 AND path = $2 ORDER BY start_line",
        uuid.UUID(tenant.id),
        path,
    )
    lines = expected.split("\n")
    assert rows and all(r["embedded"] for r in rows)
    assert all(r["content"] == "\n".join(lines[r["start_line"] - 1 : r["end_line"]]) for r in rows)
    assert rows[-1]["end_line"] >= len(expected.rstrip("\n").split("\n"))
