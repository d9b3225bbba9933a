"""Bounded requests: body caps before auth, idempotency conflicts, rate limits and tenant quotas."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from app.infra.config import Settings
from app.rate_limit import RateLimiter
from app.state import ServiceState
from tests.support import TenantFactory

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


async def test_idempotency_key_reused_for_a_different_write_is_a_409(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    """Same key, other content or another endpoint used to answer 201 with the first memory."""
    tenant = await make_tenant()
    first = await client.post(
        "/v1/facts", json={"content": "Ana likes tea", "idempotency_key": "k1"}, headers=tenant.headers()
    )
    assert first.status_code == 201
    again = await client.post(
        "/v1/facts", json={"content": "Ana likes tea", "idempotency_key": "k1"}, headers=tenant.headers()
    )
    assert again.status_code == 201
    assert again.json()["id"] == first.json()["id"]
    for path, body in (
        ("/v1/facts", {"content": "Ana likes coffee", "idempotency_key": "k1"}),
        ("/v1/facts", {"content": "Ana likes tea", "importance": 9, "idempotency_key": "k1"}),
        ("/v1/rules", {"content": "Ana likes tea", "idempotency_key": "k1"}),
        (
            "/v1/memories:batch",
            {"items": [{"type": "rule", "content": "Ana likes tea", "idempotency_key": "k1"}]},
        ),
    ):
        response = await client.post(path, json=body, headers=tenant.headers())
        assert response.status_code == 409, (path, body, response.text)
        error = response.json()["error"]
        assert error["code"] == "idempotency_conflict"
        assert error["details"]["id"] == first.json()["id"]
    # The same fact through the batch endpoint is the same write.
    batch = await client.post(
        "/v1/memories:batch",
        json={"items": [{"type": "fact", "content": "Ana likes tea", "idempotency_key": "k1"}]},
        headers=tenant.headers(),
    )
    assert batch.status_code == 201
    assert batch.json()["items"][0]["id"] == first.json()["id"]
    # Keys belong to a tenant: another tenant's k1 is its own memory.
    other = await make_tenant()
    theirs = await client.post(
        "/v1/rules", json={"content": "Other text", "idempotency_key": "k1"}, headers=other.headers()
    )
    assert theirs.status_code == 201
    assert theirs.json()["id"] != first.json()["id"]


async def test_rate_limit_answers_429_with_retry_after_per_key(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    service: ServiceState,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(service, "rate_limiter", RateLimiter(per_second=0.1, burst=3))
    tenant = await make_tenant()
    statuses = [
        (await client.post("/v1/search", json={"query": "x"}, headers=tenant.headers("reader"))).status_code
        for _ in range(4)
    ]
    assert statuses == [200, 200, 200, 429]
    limited = await client.post("/v1/search", json={"query": "x"}, headers=tenant.headers("reader"))
    assert limited.status_code == 429
    assert limited.headers["retry-after"] in {"9", "10"}  # a token comes back every 10 s
    assert limited.json()["error"]["code"] == "too_many_requests"
    # Another key (same tenant) has its own bucket.
    other_key = await client.post("/v1/search", json={"query": "x"}, headers=tenant.headers("writer"))
    assert other_key.status_code == 200


async def test_rate_limit_is_on_by_default(settings: Settings, service: ServiceState) -> None:
    assert settings.rate_limit_per_second == 50 and settings.rate_limit_burst == 100
    assert service.rate_limiter is not None


async def test_tenant_quota_refuses_writes_past_it_and_counts_deletes(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    service: ServiceState,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(service.settings, "tenant_max_memories", 3)
    tenant = await make_tenant()
    ids = []
    for i in range(3):
        stored = await client.post("/v1/facts", json={"content": f"fact {i}"}, headers=tenant.headers())
        assert stored.status_code == 201
        ids.append(stored.json()["id"])
    over = await client.post("/v1/rules", json={"content": "one too many"}, headers=tenant.headers())
    assert over.status_code == 413
    error = over.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert "quota of 3" in error["message"]
    document = await client.put(
        "/v1/documents", json={"path": "a.md", "content": "# A\n\nsome text"}, headers=tenant.headers()
    )
    assert document.status_code == 413
    # Another tenant is not affected by this one's usage.
    other = await make_tenant()
    assert (await client.post("/v1/facts", json={"content": "x"}, headers=other.headers())).status_code == 201
    assert (await client.delete(f"/v1/memories/{ids[0]}", headers=tenant.headers())).status_code == 204
    batch = await client.post(
        "/v1/memories:batch",
        json={"items": [{"type": "fact", "content": "b1"}, {"type": "fact", "content": "b2"}]},
        headers=tenant.headers(),
    )
    assert batch.status_code == 413  # all or nothing: 2 + 2 is over 3
    assert (
        await client.post("/v1/facts", json={"content": "fits"}, headers=tenant.headers())
    ).status_code == 201


async def test_tenant_byte_quota(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    service: ServiceState,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(service.settings, "tenant_max_bytes", 10_000)
    tenant = await make_tenant()
    fits = await client.post("/v1/facts", json={"content": "a" * 6000}, headers=tenant.headers())
    assert fits.status_code == 201
    over = await client.post(
        "/v1/facts", json={"content": "b" * 3000, "metadata": {"m": "c" * 2000}}, headers=tenant.headers()
    )
    assert over.status_code == 413
    assert "bytes" in over.json()["error"]["message"]
