"""Numbers at their extremes: refused at the door, or stored so that every later read still works."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests.support import TenantFactory, TenantKeys

# Each of these was stored with 201 and then made every search and recall of the tenant answer 500
# (PostgreSQL float underflow, SQLSTATE 22003).
POISON = [
    ("/v1/facts", {"decay_rate": 5e-324}),
    ("/v1/facts", {"decay_rate": 1e-310}),
    ("/v1/rules", {"decay_rate": 1e-310}),
    ("/v1/facts", {"confidence": 5e-324}),
    ("/v1/rules", {"confidence": 1e-310}),
    ("/v1/facts", {"importance": 5e-324}),
    ("/v1/episodes", {"importance": 5e-324, "butler": "b"}),
    ("/v1/facts", {"decay_rate": 1e300}),
    ("/v1/facts", {"confidence": 5e-324, "decay_rate": 5e-324}),
]


async def _reads_answer(client: httpx.AsyncClient, tenant: TenantKeys, operator: TenantKeys) -> None:
    """Search in every mode, recall, list and an operator's all-tenant search all answer 200."""
    headers = tenant.headers("reader")
    for mode in ("hybrid", "semantic", "keyword"):
        found = await client.post(
            "/v1/search", json={"query": "quokka extremes", "mode": mode}, headers=headers
        )
        assert found.status_code == 200, (mode, found.text)
    recalled = await client.post("/v1/recall", json={"topic": "quokka extremes"}, headers=headers)
    assert recalled.status_code == 200, recalled.text
    for kind in ("fact", "rule", "episode"):
        listed = await client.get("/v1/memories", params={"type": kind}, headers=headers)
        assert listed.status_code == 200, listed.text
    everyone = await client.post(
        "/v1/search",
        json={"query": "quokka extremes", "all_tenants": True},
        headers=operator.headers("reader"),
    )
    assert everyone.status_code == 200, everyone.text


@pytest.mark.parametrize(("endpoint", "numbers"), POISON)
async def test_a_number_too_close_to_zero_or_too_large_is_refused_and_reads_keep_working(
    client: httpx.AsyncClient, make_tenant: TenantFactory, endpoint: str, numbers: dict[str, Any]
) -> None:
    tenant = await make_tenant()
    operator = await make_tenant("op", operator=True)
    body = {"content": "quokka extremes probe", **numbers}
    response = await client.post(endpoint, json=body, headers=tenant.headers())
    assert response.status_code == 422, response.text
    field = next(iter(numbers))
    assert response.json()["error"]["details"][0]["loc"][-1] in numbers, field
    batch = await client.post(
        "/v1/memories:batch",
        json={"items": [{"type": endpoint.removeprefix("/v1/").removesuffix("s"), **body}]},
        headers=tenant.headers(),
    )
    assert batch.status_code == 422, batch.text
    listed = await client.get("/v1/memories", params={"type": "fact"}, headers=tenant.headers("reader"))
    assert listed.json()["items"] == []
    await _reads_answer(client, tenant, operator)


async def test_numbers_at_the_edges_of_their_ranges_are_stored_and_every_read_works(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    operator = await make_tenant("op", operator=True)
    long_ago = datetime(1900, 1, 1, tzinfo=UTC).isoformat()
    bodies: list[dict[str, Any]] = [
        {"confidence": 1e-6, "decay_rate": 10, "importance": 1e-6, "last_confirmed_at": long_ago},
        {"confidence": 1, "decay_rate": 1e-6, "importance": 10, "last_confirmed_at": long_ago},
        {"confidence": 0, "decay_rate": 0, "importance": 0},
        {"confidence": 1e-5, "decay_rate": 1e-6, "importance": 10},
    ]
    for position, numbers in enumerate(bodies):
        for endpoint in ("/v1/facts", "/v1/rules"):
            # Distinct words per row: the same content twice is one memory, and one answer never
            # shows the same content twice, whatever the kind (R-M7).
            content = f"quokka extremes probe {endpoint.removeprefix('/v1/')} {position}"
            stored = await client.post(
                endpoint, json={"content": content, **numbers}, headers=tenant.headers()
            )
            assert stored.status_code == 201, stored.text
    await _reads_answer(client, tenant, operator)
    # The confidence floor of a search at its own extremes, over those rows.
    for floor in (1e-6, 0.5, 1):
        found = await client.post(
            "/v1/search",
            json={"query": "quokka extremes", "min_confidence": floor, "min_score": 0},
            headers=tenant.headers("reader"),
        )
        assert found.status_code == 200, found.text
        recalled = await client.post(
            "/v1/recall",
            json={"topic": "quokka extremes", "min_confidence": floor},
            headers=tenant.headers("reader"),
        )
        assert recalled.status_code == 200, recalled.text
    everything = await client.post(
        "/v1/search",
        json={"query": "quokka extremes", "min_confidence": 1e-6, "min_score": 0, "mode": "keyword"},
        headers=tenant.headers("reader"),
    )
    # Confidence 1e-6 decaying at 10 a day since 1900 is gone, confidence 0 is below any floor; a
    # fact and a rule of each other kind stay.
    assert len(everything.json()["results"]) == 4


@pytest.mark.parametrize(
    ("endpoint", "body"),
    [
        ("/v1/facts", {"content": "quokka", "importance": False}),
        ("/v1/facts", {"content": "quokka", "confidence": True}),
        ("/v1/rules", {"content": "quokka", "decay_rate": "0.1"}),
        ("/v1/search", {"query": "quokka", "limit": True}),
        ("/v1/search", {"query": "quokka", "min_score": False}),
        ("/v1/search", {"query": "quokka", "weights": {"semantic": True}}),
        ("/v1/search", {"query": "quokka", "limit": "5"}),
        ("/v1/recall", {"topic": "quokka", "score_weights": {"relevance": False}}),
        ("/v1/search", {"query": "quokka", "half_life_days": 5e-324}),
        ("/v1/search", {"query": "quokka", "half_life_days": 1e300}),
        ("/v1/search", {"query": "quokka", "min_confidence": 5e-324}),
        ("/v1/search", {"query": "quokka", "weights": {"semantic": 5e-324, "keyword": 0}}),
    ],
)
async def test_a_number_field_takes_json_numbers_only(
    client: httpx.AsyncClient, make_tenant: TenantFactory, endpoint: str, body: dict[str, Any]
) -> None:
    tenant = await make_tenant()
    response = await client.post(endpoint, json=body, headers=tenant.headers())
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "validation_error"


@pytest.mark.parametrize(
    "scope_settings",
    [
        {"half_life_days": 5e-324},
        {"recency_half_life_days": 1e-310},
        {"score_weights": {"relevance": 5e-324}},
        {"fusion_weights": {"semantic": 1e-310}},
        {"fusion_weights": {"k": True}},
        {"rerank_top_n": False},
    ],
)
async def test_scope_settings_take_the_same_number_rule(
    client: httpx.AsyncClient, make_tenant: TenantFactory, scope_settings: dict[str, Any]
) -> None:
    tenant = await make_tenant()
    response = await client.put(
        "/v1/scopes/health/settings", json=scope_settings, headers=tenant.headers("admin")
    )
    assert response.status_code == 422, response.text
    found = await client.post(
        "/v1/search", json={"query": "quokka", "scope": "health"}, headers=tenant.headers("reader")
    )
    assert found.status_code == 200, found.text
