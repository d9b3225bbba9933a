"""One tenant's traffic never slows another down or tells it anything: cache, timing, embedder queues."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import asyncpg
import httpx
import numpy as np
import numpy.typing as npt
import pytest

from app.embeddings.base import Embedder, EmbedderIdentity
from app.services import code as code_service
from app.services import documents as documents_service
from tests.support import TenantFactory

# Not about semantics: these embedders are stubs so the tests can see and steer every encode call.
_IDENTITY = EmbedderIdentity("stub", "stub", 4)


def _vectors(texts: Sequence[str]) -> npt.NDArray[np.float32]:
    return np.ones((len(texts), 4), dtype=np.float32)


async def test_search_sends_no_server_timing_unless_enabled(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    """The embed phase's duration told a tenant whether someone had searched a string recently."""
    tenant = await make_tenant()
    await client.post("/v1/facts", json={"content": "The kayak is in Lisbon"}, headers=tenant.headers())
    for path, body in (("/v1/search", {"query": "kayak"}), ("/v1/recall", {"topic": "kayak"})):
        response = await client.post(path, json=body, headers=tenant.headers("reader"))
        assert response.status_code == 200
        assert "server-timing" not in response.headers, path


async def test_query_embedding_cache_is_not_shared_between_tenants() -> None:
    """A second tenant asking the same string is embedded afresh, so its latency reveals nothing."""
    calls: list[list[str]] = []

    def encode(texts: Sequence[str]) -> npt.NDArray[np.float32]:
        calls.append(list(texts))
        return _vectors(texts)

    embedder = Embedder(_IDENTITY, encode, runtime="stub", batch_size=8, cache_size=16)
    try:
        await embedder.embed_query("who searched this?", tenant_id="tenant-a")
        await embedder.embed_query("who searched this?", tenant_id="tenant-a")
        assert len(calls) == 1  # the tenant's own repeat is a hit
        await embedder.embed_query("who searched this?", tenant_id="tenant-b")
        assert len(calls) == 2
    finally:
        embedder.close()


async def test_query_embedding_does_not_wait_behind_bulk_document_embedding() -> None:
    """A document batch that cannot finish until a query is answered must not block that query."""
    release_documents = threading.Event()

    def encode(texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if texts and texts[0].startswith("document"):
            # Blocks the worker it runs on until the query below has its vector (or 10 s pass).
            release_documents.wait(timeout=10)
        return _vectors(texts)

    embedder = Embedder(_IDENTITY, encode, runtime="stub", batch_size=2, cache_size=16)
    try:
        bulk = asyncio.create_task(embedder.embed_documents([f"document {i}" for i in range(8)]))
        await asyncio.sleep(0.05)  # the first document batch is now running
        vector = await asyncio.wait_for(embedder.embed_query("urgent", tenant_id="t"), timeout=5)
        assert not bulk.done()
        assert vector.shape == (4,)
        release_documents.set()
        assert len(await bulk) == 8
    finally:
        release_documents.set()
        embedder.close()


async def test_substring_fallback_reads_a_bounded_window_of_recent_rows(
    client: httpx.AsyncClient, make_tenant: TenantFactory, admin_conn: asyncpg.Connection
) -> None:
    """A keyword query that matches no indexed word used to ILIKE-scan every row of the tenant."""
    tenant = await make_tenant()
    # Setup the API cannot do quickly: 600 older facts, written straight into the table.
    await admin_conn.execute(
        "INSERT INTO memory (tenant_id, id, kind, content, search_text, created_at, confidence, "
        "decay_rate, last_confirmed_at, validity) "
        "SELECT $1, gen_random_uuid(), 'fact', c, c, now() - make_interval(mins => i), 1, 0, now(), 'active' "
        "FROM generate_series(1, 600) AS i, "
        "LATERAL (SELECT CASE WHEN i = 600 THEN 'oldest note zebrafinchpartial' ELSE 'filler note ' || i END) AS t(c)",
        uuid.UUID(tenant.id),
    )
    body = {"query": "ebrafinchpart", "mode": "keyword", "min_score": 0}
    old = await client.post("/v1/search", json=body, headers=tenant.headers("reader"))
    assert old.status_code == 200
    assert old.json()["results"] == []  # outside the newest-rows window: not scanned
    recent = await client.post(
        "/v1/facts", json={"content": "recent note zebrafinchpartial"}, headers=tenant.headers()
    )
    found = await client.post("/v1/search", json=body, headers=tenant.headers("reader"))
    assert [r["id"] for r in found.json()["results"]] == [recent.json()["id"]]
    assert found.json()["results"][0]["match_type"] == "fulltext"


@pytest.mark.parametrize(
    ("module", "function", "method", "path", "body"),
    [
        (
            documents_service,
            "chunk_markdown",
            "PUT",
            "/v1/documents",
            {"path": "a.md", "content": "# A\ntext"},
        ),
        (
            code_service,
            "parse_code",
            "PUT",
            "/v1/code/files",
            {"repository": "r", "files": [{"path": "a.py", "content": "def f():\n    pass\n"}]},
        ),
    ],
)
async def test_chunking_and_parsing_run_off_the_event_loop(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    monkeypatch: pytest.MonkeyPatch,
    module: ModuleType,
    function: str,
    method: str,
    path: str,
    body: dict[str, Any],
) -> None:
    """While one upload is chunked or parsed, the event loop keeps serving everyone else."""
    tenant = await make_tenant()
    real = getattr(module, function)
    started, loop_ran = threading.Event(), threading.Event()
    blocked: list[bool] = []

    def slow(*args: Any) -> Any:
        # Stands in for a long parse: it ends when the event loop has run other work meanwhile,
        # or after 5 s when the loop could not (this very call was holding it).
        started.set()
        blocked.append(not loop_ran.wait(timeout=5))
        return real(*args)

    monkeypatch.setattr(module, function, slow)

    async def other_tenant_work() -> None:
        await asyncio.to_thread(started.wait, 10)
        loop_ran.set()  # reached only if the loop runs while the parse is under way

    upload = asyncio.create_task(client.request(method, path, json=body, headers=tenant.headers()))
    await asyncio.sleep(0)
    other = asyncio.create_task(other_tenant_work())
    response = await upload
    await other
    assert response.status_code == 200, response.text
    assert blocked == [False]
