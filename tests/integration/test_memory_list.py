"""GET /v1/memories: browsing a tenant's memories by kind and scope, page by page."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx

from app.infra.db import tenant_transaction
from app.repositories import memories as memory_repo
from tests.support import TenantFactory


async def test_pages_list_one_kind_newest_first_without_counting_a_retrieval(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    start = datetime.now(UTC) - timedelta(days=1)
    facts = []
    for n in range(5):
        stored = await client.post(
            "/v1/facts",
            json={"content": f"fact number {n}", "created_at": (start + timedelta(minutes=n)).isoformat()},
            headers=tenant.headers(),
        )
        assert stored.status_code == 201
        facts.append(stored.json()["id"])
    await client.post("/v1/rules", json={"content": "a rule, not a fact"}, headers=tenant.headers())

    reader = tenant.headers("reader")
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, str | int] = {"type": "fact", "limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = await client.get("/v1/memories", params=params, headers=reader)
        assert page.status_code == 200, page.text
        body = page.json()
        assert len(body["items"]) <= 2
        seen += [item["id"] for item in body["items"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(facts))
    assert pages == 3
    first = (await client.get("/v1/memories", params={"type": "fact", "limit": 1}, headers=reader)).json()
    item = first["items"][0]
    # Every field of the kind, as memory_get shows it; browsing is not a retrieval.
    assert item["content"] == "fact number 4"
    assert item["subject"] is None and item["validity"] == "active" and item["effective_confidence"] > 0.9
    assert item["reference_count"] == 0 and item["last_referenced_at"] is None
    rules = (await client.get("/v1/memories", params={"type": "rule"}, headers=reader)).json()
    assert [r["content"] for r in rules["items"]] == ["a rule, not a fact"]
    assert rules["next_cursor"] is None


async def test_scope_filter_is_exact_and_expired_episodes_are_left_out(
    client: httpx.AsyncClient, make_tenant: TenantFactory, admin_conn: asyncpg.Connection
) -> None:
    tenant = await make_tenant()
    for content, scope in (("in health", "health"), ("in global", "global"), ("in travel", "travel")):
        await client.post("/v1/facts", json={"content": content, "scope": scope}, headers=tenant.headers())
    health = await client.get(
        "/v1/memories", params={"type": "fact", "scope": "health"}, headers=tenant.headers("reader")
    )
    assert [m["content"] for m in health.json()["items"]] == ["in health"]
    for content in ("gone", "still here"):
        body = {"content": content, "butler": "concierge"}
        assert (await client.post("/v1/episodes", json=body, headers=tenant.headers())).status_code == 201
    # The API refuses an expires_at in the past, so "gone" expires in the database.
    await admin_conn.execute(
        "UPDATE memory SET expires_at = $1 WHERE tenant_id = $2 AND content = 'gone'",
        datetime.now(UTC) - timedelta(hours=1),
        uuid.UUID(tenant.id),
    )
    episodes = await client.get("/v1/memories", params={"type": "episode"}, headers=tenant.headers("reader"))
    assert [m["content"] for m in episodes.json()["items"]] == ["still here"]


async def test_listing_shows_only_the_callers_tenant_and_rls_backs_it_up(
    client: httpx.AsyncClient, make_tenant: TenantFactory, serving_conn: asyncpg.Connection
) -> None:
    a = await make_tenant("a")
    b = await make_tenant("b")
    await client.post("/v1/facts", json={"content": "b's private fact"}, headers=b.headers())
    listed = await client.get("/v1/memories", params={"type": "fact"}, headers=a.headers("reader"))
    assert listed.status_code == 200
    assert listed.json() == {"items": [], "next_cursor": None}
    # As the service's login role: the statement asks for b's rows inside a transaction bounded
    # to a, and RLS alone returns nothing.
    async with tenant_transaction(serving_conn, [a.id]):
        rows = await memory_repo.list_memories(
            serving_conn, tenant_id=b.id, kind="fact", scope=None, after=None, limit=10
        )
    assert rows == []
    async with tenant_transaction(serving_conn, [b.id]):
        rows = await memory_repo.list_memories(
            serving_conn, tenant_id=b.id, kind="fact", scope=None, after=None, limit=10
        )
    assert [r["content"] for r in rows] == ["b's private fact"]


async def test_bad_listing_parameters_get_clear_errors(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    reader = tenant.headers("reader")
    assert (await client.get("/v1/memories", params={"type": "fact"})).status_code == 401
    pattern = "String should match pattern '^[A-Za-z0-9][A-Za-z0-9_.:-]*$'"
    cases: tuple[tuple[dict[str, str | int], str], ...] = (
        ({}, "query.type: Field required"),
        ({"type": "note"}, "query.type: Input should be 'fact', 'rule', 'episode', 'document' or 'code'"),
        ({"type": "fact", "limit": 0}, "query.limit: Input should be greater than or equal to 1"),
        ({"type": "fact", "scope": "no spaces"}, f"query.scope: {pattern}"),
        ({"type": "fact", "cursor": "not-a-cursor"}, "cursor: not a next_cursor returned by this endpoint"),
        # Decodes, but to no (time, id) position.
        ({"type": "fact", "cursor": "MjAyNnxub3Bl"}, "cursor: not a next_cursor returned by this endpoint"),
    )
    for params, message in cases:
        response = await client.get("/v1/memories", params=params, headers=reader)
        assert response.status_code == 422, params
        error = response.json()["error"]
        assert (error["code"], error["message"]) == ("validation_error", message)


async def test_an_episode_is_filed_under_its_butler_for_list_and_search_alike(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    # R-S10a: a scope that differs from the butler is refused, and nothing is stored.
    for path, body in (
        ("/v1/episodes", {"content": "Booked the Lisbon flight", "butler": "planner", "scope": "trips"}),
        (
            "/v1/memories:batch",
            {"items": [{"type": "episode", "content": "x", "butler": "planner", "scope": "trips"}]},
        ),
    ):
        refused = await client.post(path, json=body, headers=tenant.headers())
        assert refused.status_code == 422, refused.text
        assert "an episode's scope is its butler" in refused.json()["error"]["message"]
    for body in (
        {"content": "Booked the Lisbon flight", "butler": "planner"},
        {"content": "Packed the Lisbon bags", "butler": "planner", "scope": "planner"},
    ):
        stored = await client.post("/v1/episodes", json=body, headers=tenant.headers())
        assert stored.status_code == 201, stored.text
        assert stored.json()["scope"] == "planner"
    listed = await client.get(
        "/v1/memories", params={"type": "episode", "scope": "planner"}, headers=tenant.headers("reader")
    )
    found = await client.post(
        "/v1/search",
        json={"query": "Lisbon", "scope": "planner", "types": ["episode"], "min_score": 0},
        headers=tenant.headers("reader"),
    )
    assert sorted(m["content"] for m in listed.json()["items"]) == [
        "Booked the Lisbon flight",
        "Packed the Lisbon bags",
    ]
    assert sorted(m["content"] for m in found.json()["results"]) == sorted(
        m["content"] for m in listed.json()["items"]
    )
    for scope in ("trips", "global"):
        other = await client.get(
            "/v1/memories", params={"type": "episode", "scope": scope}, headers=tenant.headers("reader")
        )
        assert other.json()["items"] == []
