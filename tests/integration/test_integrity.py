"""Integrity under concurrency and partial failure: deadlocks, racing deletes, deleted chunks, a failing embedder."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import httpx
import pytest

from app.repositories import chunks as chunk_repo
from app.state import ServiceState
from tests.support import TenantFactory


async def test_a_deadlock_is_retried_and_each_unit_of_work_applies_once(
    client: httpx.AsyncClient, make_tenant: TenantFactory, service: ServiceState
) -> None:
    tenant = await make_tenant("deadlock")
    ids = []
    for text in ("first row", "second row"):
        stored = await client.post(
            "/v1/facts", json={"content": text, "importance": 5}, headers=tenant.headers()
        )
        ids.append(uuid.UUID(stored.json()["id"]))
    took_first = {"a": asyncio.Event(), "b": asyncio.Event()}
    tries = {"a": 0, "b": 0}

    async def unit(name: str, other: str, order: list[uuid.UUID]) -> None:
        async def work(conn: asyncpg.Connection) -> None:
            tries[name] += 1
            # Two writers locking the same rows in opposite orders: PostgreSQL aborts one (40P01).
            await conn.execute("UPDATE memory SET importance = importance + 1 WHERE id = $1", order[0])
            took_first[name].set()
            await took_first[other].wait()
            await conn.execute("UPDATE memory SET importance = importance + 1 WHERE id = $1", order[1])

        await service.db.run([tenant.id], work)

    await asyncio.wait_for(asyncio.gather(unit("a", "b", ids), unit("b", "a", ids[::-1])), 30)
    assert sorted(tries.values()) == [1, 2]  # the deadlock victim ran again, once
    for memory_id in ids:
        got = await client.get(f"/v1/memories/{memory_id}", headers=tenant.headers("reader"))
        assert got.json()["importance"] == 7  # each unit's two updates applied exactly once


async def test_deleting_a_document_waits_for_an_upload_of_the_same_path(
    client: httpx.AsyncClient, make_tenant: TenantFactory, admin_conn: asyncpg.Connection
) -> None:
    tenant = await make_tenant("race")
    path = "notes/race.md"
    put = await client.put(
        "/v1/documents", json={"path": path, "content": "# Race\n\nbody"}, headers=tenant.headers()
    )
    assert put.status_code == 200
    async with admin_conn.transaction():
        # Stands in for an upload of the same path in progress: it holds the path lock.
        await chunk_repo.lock_path(admin_conn, tenant_id=tenant.id, path=path)
        deleting = asyncio.create_task(
            client.delete("/v1/documents", params={"path": path}, headers=tenant.headers())
        )
        await asyncio.sleep(1.0)
        assert not deleting.done()  # the delete queues behind the upload instead of interleaving
    assert (await asyncio.wait_for(deleting, 10)).status_code == 204
    listed = await client.get("/v1/documents:list", headers=tenant.headers("reader"))
    assert listed.json()["documents"] == []


async def test_a_deleted_document_chunk_comes_back_with_the_next_upload(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant("chunk")
    document = {"path": "notes/birds.md", "content": "# Birds\n\nThe quetzalcoatlus flew over Tirana."}
    assert (await client.put("/v1/documents", json=document, headers=tenant.headers())).status_code == 200
    query = {"query": "quetzalcoatlus", "mode": "keyword", "types": ["document"]}
    hits = (await client.post("/v1/search", json=query, headers=tenant.headers())).json()["results"]
    assert len(hits) == 1
    assert (await client.delete(f"/v1/memories/{hits[0]['id']}", headers=tenant.headers())).status_code == 204
    assert (await client.post("/v1/search", json=query, headers=tenant.headers())).json()["results"] == []

    again = await client.put("/v1/documents", json=document, headers=tenant.headers())
    assert again.json()["unchanged"] is False
    back = (await client.post("/v1/search", json=query, headers=tenant.headers())).json()["results"]
    assert [h["path"] for h in back] == ["notes/birds.md"]


async def test_a_failing_embedding_provider_degrades_search_to_keyword(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    service: ServiceState,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tenant = await make_tenant("degrade")
    stored = await client.post(
        "/v1/facts", json={"content": "The heron nests by the Ohrid lake"}, headers=tenant.headers()
    )
    assert service.embedder is not None

    async def provider_down(text: str, **_: object) -> list[float]:  # test-only stand-in for an outage
        raise ConnectionError("embedding endpoint unreachable")

    monkeypatch.setattr(service.embedder, "embed_query", provider_down)
    answer = await client.post(
        "/v1/search", json={"query": "heron Ohrid lake", "mode": "hybrid"}, headers=tenant.headers("reader")
    )
    assert answer.status_code == 200
    assert answer.json()["embedding_used"] is False
    assert [r["id"] for r in answer.json()["results"]] == [stored.json()["id"]]
