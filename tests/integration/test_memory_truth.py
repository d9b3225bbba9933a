"""Memories that stay true (R-M7, R-M8): duplicates, supersession by subject and predicate, history.

Real database, real MiniLM: duplicates and supersession are decided in the write transaction.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.support import TenantFactory, TenantKeys

DENTIST = "The user's dentist is Dr. Okafor on Rua Augusta."


async def _write(
    client: httpx.AsyncClient, tenant: TenantKeys, kind: str, status: int = 201, **body: Any
) -> dict[str, Any]:
    response = await client.post(f"/v1/{kind}", json=body, headers=tenant.headers())
    assert response.status_code == status, response.text
    written: dict[str, Any] = response.json()
    return written


async def _history(client: httpx.AsyncClient, tenant: TenantKeys, memory_id: str) -> list[dict[str, Any]]:
    response = await client.get(f"/v1/memories/{memory_id}/history", headers=tenant.headers("reader"))
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


async def _facts(client: httpx.AsyncClient, tenant: TenantKeys) -> list[dict[str, Any]]:
    response = await client.get("/v1/memories?type=fact&limit=100", headers=tenant.headers("reader"))
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


async def test_the_same_fact_in_other_case_and_punctuation_is_one_memory(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    first = await _write(client, tenant, "facts", content=DENTIST, subject="user", predicate="dentist")
    assert first["duplicate_of"] is None and first["superseded"] == [] and first["similar_to"] == []
    again = await _write(
        client,
        tenant,
        "facts",
        status=200,
        content="  the user's   dentist is dr. okafor on rua augusta",
        subject="user",
        predicate="dentist",
    )
    assert again["id"] == first["id"] and again["duplicate_of"] == first["id"]
    assert again["content"] == DENTIST
    assert again["last_confirmed_at"] > first["last_confirmed_at"]
    assert [f["id"] for f in await _facts(client, tenant)] == [first["id"]]


async def test_same_words_in_another_scope_subject_or_kind_are_not_duplicates(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    await _write(client, tenant, "facts", content=DENTIST, subject="user")
    await _write(client, tenant, "facts", content=DENTIST, subject="user", scope="health")
    await _write(client, tenant, "facts", content=DENTIST, subject="partner")
    await _write(client, tenant, "rules", content=DENTIST)
    await _write(client, tenant, "rules", status=200, content=DENTIST.upper())
    assert len(await _facts(client, tenant)) == 3


async def test_a_superseded_fact_is_no_duplicate_target(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    lisbon = await _write(
        client, tenant, "facts", content="User lives in Lisbon", subject="user", predicate="lives_in"
    )
    porto = await _write(
        client,
        tenant,
        "facts",
        content="User lives in Porto",
        subject="user",
        predicate="lives_in",
        supersede="subject_predicate",
    )
    back = await _write(
        client,
        tenant,
        "facts",
        content="User lives in Lisbon.",
        subject="user",
        predicate="lives_in",
        supersede="subject_predicate",
    )
    assert back["duplicate_of"] is None and back["id"] != lisbon["id"]
    assert back["superseded"] == [porto["id"]]
    assert [h["id"] for h in await _history(client, tenant, lisbon["id"])] == [
        back["id"],
        porto["id"],
        lisbon["id"],
    ]


async def test_episodes_of_a_session_are_turns_not_duplicates(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    turn: dict[str, Any] = {"content": "Yes.", "butler": "concierge", "session_id": "s1"}
    first = await _write(client, tenant, "episodes", **turn)
    second = await _write(client, tenant, "episodes", **turn)
    assert first["id"] != second["id"]
    note: dict[str, Any] = {"content": "Booked Luigi's for Friday", "butler": "concierge"}
    kept = await _write(client, tenant, "episodes", **note)
    assert (await _write(client, tenant, "episodes", status=200, **note))["duplicate_of"] == kept["id"]


async def test_batch_items_say_which_are_duplicates_and_all_or_nothing_stays(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    stored = await _write(client, tenant, "facts", content=DENTIST, subject="user")
    items = [
        {"type": "fact", "content": "The user's dentist is Dr. Okafor on Rua Augusta!", "subject": "user"},
        {"type": "fact", "content": "User's sister is called Ana", "subject": "user"},
        {"type": "fact", "content": "user's sister is called ana.", "subject": "user"},
    ]
    response = await client.post("/v1/memories:batch", json={"items": items}, headers=tenant.headers())
    assert response.status_code == 201, response.text
    out = response.json()["items"]
    assert out[0]["id"] == stored["id"] and out[0]["duplicate_of"] == stored["id"]
    assert out[1]["duplicate_of"] is None
    assert out[2]["id"] == out[1]["id"] and out[2]["duplicate_of"] == out[1]["id"]
    assert len(await _facts(client, tenant)) == 2
    again = await client.post("/v1/memories:batch", json={"items": items[:2]}, headers=tenant.headers())
    assert again.status_code == 200, again.text
    assert [i["duplicate_of"] for i in again.json()["items"]] == [stored["id"], out[1]["id"]]
    # One bad item: nothing of the batch is stored, no duplicate is confirmed.
    bad = [items[0], {"type": "fact", "content": "x", "supersedes": "00000000-0000-0000-0000-000000000000"}]
    failed = await client.post("/v1/memories:batch", json={"items": bad}, headers=tenant.headers())
    assert failed.status_code == 422, failed.text
    assert len(await _facts(client, tenant)) == 2


async def test_two_identical_writes_at_once_store_one_memory(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    body = {"content": "The user's cat is called Miso", "subject": "user"}
    answers = await asyncio.gather(
        *(client.post("/v1/facts", json=body, headers=tenant.headers()) for _ in range(4))
    )
    assert sorted(a.status_code for a in answers) == [200, 200, 200, 201]
    assert len({a.json()["id"] for a in answers}) == 1
    assert len(await _facts(client, tenant)) == 1


async def test_supersede_by_subject_and_predicate_replaces_the_active_facts(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    old = await _write(
        client, tenant, "facts", content="The user lives in Lisbon", subject="user", predicate="lives_in"
    )
    other_scope = await _write(
        client,
        tenant,
        "facts",
        content="The user lives in Lisbon",
        subject="user",
        predicate="lives_in",
        scope="work",
    )
    new = await _write(
        client,
        tenant,
        "facts",
        content="The user lives in Porto",
        subject="user",
        predicate="lives_in",
        supersede="subject_predicate",
    )
    assert new["superseded"] == [old["id"]] and new["supersedes"] == old["id"]
    chain = await _history(client, tenant, old["id"])
    assert [h["id"] for h in chain] == [new["id"], old["id"]]
    assert chain[1]["validity"] == "superseded" and chain[1]["superseded_by"] == new["id"]
    assert chain[1]["valid_to"] == new["valid_from"] and chain[0]["valid_to"] is None
    assert (await _history(client, tenant, other_scope["id"]))[0]["validity"] == "active"


async def test_supersede_needs_subject_and_predicate(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    response = await client.post(
        "/v1/facts",
        json={"content": "Lives in Porto", "subject": "user", "supersede": "subject_predicate"},
        headers=tenant.headers(),
    )
    assert response.status_code == 422
    assert response.json()["error"]["details"] == {"item": 0, "field": "supersede"}
    assert await _facts(client, tenant) == []


async def test_single_valued_predicates_supersede_without_asking_and_likes_never(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    settings = await client.put(
        "/v1/scopes/home/settings",
        json={"single_valued_predicates": ["lives_in"]},
        headers=tenant.headers("admin"),
    )
    assert settings.status_code == 200, settings.text
    fact: dict[str, Any] = {"subject": "user", "scope": "home"}
    lisbon = await _write(
        client, tenant, "facts", content="User lives in Lisbon", predicate="lives_in", **fact
    )
    porto = await _write(client, tenant, "facts", content="User lives in Porto", predicate="lives_in", **fact)
    assert porto["superseded"] == [lisbon["id"]]
    tea = await _write(client, tenant, "facts", content="User likes tea", predicate="likes", **fact)
    jazz = await _write(client, tenant, "facts", content="User likes jazz", predicate="likes", **fact)
    assert jazz["superseded"] == []
    active = {f["id"] for f in await _facts(client, tenant) if f["validity"] == "active"}
    assert active == {porto["id"], tea["id"], jazz["id"]}


async def test_facts_of_one_slot_in_one_batch_replace_each_other_in_order(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    slot = {"type": "fact", "subject": "user", "predicate": "works_at", "supersede": "subject_predicate"}
    items = [{**slot, "content": "User works at Acme"}, {**slot, "content": "User works at Globex"}]
    response = await client.post("/v1/memories:batch", json={"items": items}, headers=tenant.headers())
    assert response.status_code == 201, response.text
    acme, globex = response.json()["items"]
    assert globex["superseded"] == [acme["id"]]
    assert [h["id"] for h in await _history(client, tenant, globex["id"])] == [globex["id"], acme["id"]]
    assert (await _history(client, tenant, acme["id"]))[1]["validity"] == "superseded"


async def test_history_is_tenant_isolated(client: httpx.AsyncClient, make_tenant: TenantFactory) -> None:
    owner, other = await make_tenant(), await make_tenant()
    fact = await _write(client, owner, "facts", content="User lives in Lisbon", subject="user")
    assert [h["id"] for h in await _history(client, owner, fact["id"])] == [fact["id"]]
    response = await client.get(f"/v1/memories/{fact['id']}/history", headers=other.headers("reader"))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


async def test_valid_to_must_follow_valid_from(client: httpx.AsyncClient, make_tenant: TenantFactory) -> None:
    tenant = await make_tenant()
    response = await client.post(
        "/v1/facts",
        json={
            "content": "User lived in Faro",
            "valid_from": "2024-01-01T00:00:00Z",
            "valid_to": "2023-01-01T00:00:00Z",
        },
        headers=tenant.headers(),
    )
    assert response.status_code == 422
    assert response.json()["error"]["details"] == {"item": 0, "field": "valid_to"}


async def test_near_duplicates_are_reported_and_merged_where_the_scope_asks(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    first = await _write(
        client, tenant, "facts", content="The user's favourite colour is a deep navy blue", subject="user"
    )
    near = await _write(
        client, tenant, "facts", content="The user's favourite colour is deep navy blue", subject="user"
    )
    assert near["duplicate_of"] is None and [s["id"] for s in near["similar_to"]] == [first["id"]]
    assert near["similar_to"][0]["similarity"] > 0.9 and near["similar_to"][0]["word_overlap"] > 0.8
    # A different value of the same property is no near-duplicate.
    other = await _write(
        client, tenant, "facts", content="The user's favourite colour is a bright orange", subject="user"
    )
    assert other["similar_to"] == []

    put = await client.put(
        "/v1/scopes/tidy/settings", json={"merge_near_duplicates": True}, headers=tenant.headers("admin")
    )
    assert put.status_code == 200, put.text
    kept = await _write(
        client, tenant, "rules", content="Always book an aisle seat on long flights", scope="tidy"
    )
    merged = await _write(
        client,
        tenant,
        "rules",
        status=200,
        content="Always book an aisle seat on long flights please",
        scope="tidy",
    )
    assert merged["id"] == kept["id"] and merged["duplicate_of"] == kept["id"]
    assert [s["id"] for s in merged["similar_to"]] == [kept["id"]]


async def _search(client: httpx.AsyncClient, tenant: TenantKeys, **body: Any) -> list[str]:
    response = await client.post(
        "/v1/search", json={"min_score": 0, **body}, headers=tenant.headers("reader")
    )
    assert response.status_code == 200, response.text
    return [r["id"] for r in response.json()["results"]]


async def _recall(client: httpx.AsyncClient, tenant: TenantKeys, **body: Any) -> list[str]:
    response = await client.post(
        "/v1/recall", json={"min_confidence": 0, **body}, headers=tenant.headers("reader")
    )
    assert response.status_code == 200, response.text
    return [r["id"] for r in response.json()["results"]]


async def test_as_of_answers_what_was_true_then_and_now_only_what_is_true(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    slot: dict[str, Any] = {"subject": "user", "predicate": "lives_in", "supersede": "subject_predicate"}
    lisbon = await _write(client, tenant, "facts", content="The user lives in Lisbon", **slot)
    await asyncio.sleep(0.05)
    between = datetime.now(UTC).isoformat()
    await asyncio.sleep(0.05)
    porto = await _write(client, tenant, "facts", content="The user lives in Porto", **slot)
    query = {"query": "where does the user live"}
    for mode in ("hybrid", "keyword", "semantic"):
        now = await _search(client, tenant, mode=mode, **query)
        assert porto["id"] in now and lisbon["id"] not in now
        then = await _search(client, tenant, mode=mode, as_of=between, **query)
        assert lisbon["id"] in then and porto["id"] not in then
    assert await _recall(client, tenant, topic="where does the user live") == [porto["id"]]
    assert await _recall(client, tenant, topic="where does the user live", as_of=between) == [lisbon["id"]]
    listed = await client.get(
        "/v1/memories", params={"type": "fact", "as_of": between}, headers=tenant.headers("reader")
    )
    assert [m["id"] for m in listed.json()["items"]] == [lisbon["id"]]
    before = (datetime.fromisoformat(lisbon["created_at"]) - timedelta(seconds=1)).isoformat()
    assert await _search(client, tenant, as_of=before, **query) == []
    # A fact sent as already ended is history: only an as_of inside its valid time finds it.
    ended = await _write(
        client,
        tenant,
        "facts",
        content="The user lived in Faro as a student",
        subject="user",
        valid_from="2010-09-01T00:00:00Z",
        valid_to="2014-07-01T00:00:00Z",
    )
    assert ended["id"] not in await _search(client, tenant, query="Faro student")
    assert await _search(client, tenant, query="Faro student", as_of="2012-01-01T00:00:00Z") == [ended["id"]]


async def test_one_answer_never_shows_the_same_words_twice(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    # Same words in two scopes: two memories (not duplicates of each other), one search answer.
    home = await _write(
        client, tenant, "facts", content="The spare key is under the blue flowerpot", scope="home"
    )
    await _write(client, tenant, "facts", content="the spare key is under the blue flowerpot!", scope="house")
    other = await _write(client, tenant, "facts", content="The spare key of the car is in the drawer")
    found = await _search(client, tenant, query="spare key blue flowerpot")
    assert found.count(home["id"]) + len(found) - len(set(found)) == 1 and other["id"] in found
    assert len(found) == 2
    assert len(await _recall(client, tenant, topic="spare key flowerpot")) == 2


@pytest.mark.parametrize(
    ("mode", "query", "exact"),
    [
        ("keyword", "spare key blue flowerpot", False),  # BM25
        ("keyword", "flowerp", False),  # no word matches: the substring tier
        ("semantic", "where is the spare key", False),  # the tenant's HNSW walk or exact scan
        ("semantic", "where is the spare key", True),  # the exact scan, asked for
        ("hybrid", "spare key blue flowerpot", True),
    ],
)
async def test_every_leg_hides_the_second_copy_of_the_same_words(
    client: httpx.AsyncClient, make_tenant: TenantFactory, mode: str, query: str, exact: bool
) -> None:
    tenant = await make_tenant()
    await _write(client, tenant, "facts", content="The spare key is under the blue flowerpot", scope="home")
    await _write(client, tenant, "facts", content="the spare key is under the blue flowerpot!", scope="house")
    found = await _search(client, tenant, query=query, mode=mode, exact=exact)
    # Two memories (other scopes), one answer: the same words are shown once.
    assert len(found) == 1, found
