"""Bounded requests: body caps before auth, idempotency conflicts, rate limits and tenant quotas."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx

from tests.conftest import TenantFactory

MIB = 1024 * 1024


async def test_oversized_body_is_refused_with_413_before_authentication(client: httpx.AsyncClient) -> None:
    body = json.dumps({"content": "x" * (2 * MIB)})
    response = await client.post("/v1/facts", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "payload_too_large"
    assert "1 MiB" in error["message"]
    assert response.headers["connection"] == "close"


async def test_streamed_body_without_length_is_cut_off_at_the_cap(client: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(4):
            yield b" " * MIB

    response = await client.post("/v1/search", content=chunks(), headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


async def test_uploads_get_the_larger_cap_and_batches_are_bounded(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    # 2 MiB is over the default cap but a document upload may be that big: it reaches auth.
    document = json.dumps({"path": "big.md", "content": "y" * (2 * MIB)})
    unauthorised = await client.put(
        "/v1/documents", content=document, headers={"Content-Type": "application/json"}
    )
    assert unauthorised.status_code == 401
    # A batch of 1,000 items of 40 KiB each (40 MB) was accepted whole before; now it is over the cap.
    items = [{"type": "fact", "content": "z" * 40_000} for _ in range(1000)]
    response = await client.post("/v1/memories:batch", json={"items": items}, headers=tenant.headers())
    assert response.status_code == 413
    assert "32 MiB" in response.json()["error"]["message"]
    assert (await client.post("/v1/search", json={"query": "z"}, headers=tenant.headers())).json()[
        "results"
    ] == []
