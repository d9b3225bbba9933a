"""The bench's own HTTP client against a real uvicorn server: answers parsed, keep-alive, all workers counted."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator

import pytest
from fastapi import FastAPI

from app.cli.admin import build_server
from app.config import Settings
from app.evaluation.bench import run_load
from app.evaluation.load_worker import Client
from app.main import create_app
from tests.conftest import TenantFactory


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
async def base_url(settings: Settings, app: FastAPI) -> AsyncIterator[str]:
    """A real uvicorn server as `recalld serve` builds it (keyword-only: it starts fast).

    Without a rate limit, as the benchmarks run it: the load test's workers share one key.
    """
    own = settings.model_copy(
        update={
            "embedding_provider": "none",
            "port": _free_port(),
            "server_timing": True,
            "rate_limit_per_second": 0,
        }
    )
    server = build_server(create_app(own), own)
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "uvicorn did not start"
        await asyncio.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{own.port}"
    finally:
        server.should_exit = True
        await task


async def test_the_client_reads_answers_and_reuses_its_connection(
    base_url: str, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant("bench-client")

    def exchange() -> list[tuple[int, dict[str, str], bytes]]:
        client = Client(base_url, tenant.writer)
        try:
            stored = client.post("/v1/facts", json.dumps({"content": "oat milk"}).encode())
            searched = client.post("/v1/search", b'{"query": "oat milk", "mode": "keyword"}')
            refused = Client(base_url, "rk_00000000_" + "x" * 43).post("/v1/search", b'{"query": "x"}')
            return [stored, searched, refused]
        finally:
            client.close()

    (stored, _, _), (status, headers, body), (refused, _, _) = await asyncio.to_thread(exchange)
    assert stored == 201
    assert status == 200
    assert [r["content"] for r in json.loads(body)["results"]] == ["oat milk"]
    assert "keyword;dur=" in headers["server-timing"]
    assert refused == 401


async def test_run_load_counts_every_worker_and_no_errors(base_url: str, make_tenant: TenantFactory) -> None:
    tenant = await make_tenant("bench-load")
    result = await asyncio.to_thread(
        run_load,
        base_url,
        tenant.reader,
        scenario="test",
        endpoint="search",
        mode="keyword",
        queries=["oat milk", "train tickets"],
        concurrency=2,
        duration_s=1.0,
    )
    assert result.errors == 0
    assert result.requests > 2
    assert result.server_ms["keyword"] >= 0
