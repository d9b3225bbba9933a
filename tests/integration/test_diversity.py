"""MMR diversity over HTTP with the real MiniLM: near-duplicates no longer fill the page."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support import TenantFactory, TenantKeys, search

DUPLICATES = (
    "Ana is visiting us in June for two weeks",
    "Ana is visiting us for two weeks in June",
    "In June Ana is visiting us for two weeks",
)
DISTINCT = (
    "Ana's flight from Lisbon lands at Heathrow on the third of June",
    "Ana will sleep in the guest room, so clear the desk out of it",
)


async def _store_all(client: httpx.AsyncClient, tenant: TenantKeys) -> dict[str, str]:
    items = [{"type": "fact", "content": text} for text in (*DUPLICATES, *DISTINCT)]
    response = await client.post("/v1/memories:batch", json={"items": items}, headers=tenant.headers())
    assert response.status_code == 201, response.text
    return {item["content"]: item["id"] for item in response.json()["items"]}


async def _search(client: httpx.AsyncClient, tenant: TenantKeys, **body: Any) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = (
        await search(client, tenant, **{"query": "Ana visiting in June", **body})
    )["results"]
    return results


async def test_diversity_lifts_distinct_memories_above_near_duplicates(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    await _store_all(client, tenant)
    plain = await _search(client, tenant)
    assert {r["content"] for r in plain[:3]} == set(DUPLICATES)

    diverse = await _search(client, tenant, diversity=0.5)
    top3 = [r["content"] for r in diverse[:3]]
    assert set(DISTINCT) <= set(top3), top3
    assert top3[0] == plain[0]["content"]  # the best result stays first
    # Same request, same data: same order; and MMR re-orders without dropping anything.
    assert [r["id"] for r in await _search(client, tenant, diversity=0.5)] == [r["id"] for r in diverse]
    assert {r["id"] for r in diverse} == {r["id"] for r in plain}
    breakdown = diverse[1]["score_breakdown"]["mmr"]
    assert set(breakdown) == {"score", "max_similarity"}
    assert diverse[0]["score_breakdown"]["mmr"]["max_similarity"] == 0.0


async def test_diversity_zero_or_absent_keeps_the_fused_order(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    await _store_all(client, tenant)
    plain = await _search(client, tenant)
    zero = await _search(client, tenant, diversity=0)
    assert [r["id"] for r in zero] == [r["id"] for r in plain]
    assert all("mmr" not in r["score_breakdown"] for r in zero)


async def test_a_shorter_diverse_page_is_a_prefix_of_a_longer_one(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    """MMR picks greedily over a pool that does not depend on limit: limit k gives the first k."""
    tenant = await make_tenant()
    await _store_all(client, tenant)
    full = [r["id"] for r in await _search(client, tenant, diversity=0.7, limit=5, min_score=0)]
    assert len(full) == 5
    for k in range(1, 5):
        page = await _search(client, tenant, diversity=0.7, limit=k, min_score=0)
        assert [r["id"] for r in page] == full[:k]
