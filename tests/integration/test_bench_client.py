"""The bench's own HTTP client against a real uvicorn server: answers parsed, keep-alive, all workers counted."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from fastapi import FastAPI

from app.infra.config import Settings
from app.main import create_app
from recalld_tools.evaluation.bench import run_load
from recalld_tools.evaluation.load_worker import Client
from tests.support import TenantFactory, free_port, served


@pytest.fixture
async def base_url(settings: Settings, app: FastAPI) -> AsyncIterator[str]:
    """A real uvicorn server as `recalld serve` builds it (keyword-only: it starts fast).

    Without a rate limit, as the benchmarks run it: the load test's workers share one key.
    """
    own = settings.model_copy(
        update={
            "embedding_provider": "none",
            "port": free_port(),
            "server_timing": True,
            "rate_limit_per_second": 0,
        }
    )
    async with served(create_app(own), own) as address:
        yield f"http://{address}"


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
        # Bounded by requests, not time: each worker sends its 3 however slow the machine is (a
        # one-second window saw 2 requests in all at load 10), so 6 means both were counted.
        duration_s=300.0,
        max_requests=6,
    )
    assert result.errors == 0
    assert result.requests == 6
    assert result.server_ms["keyword"] >= 0
