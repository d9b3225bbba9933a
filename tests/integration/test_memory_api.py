"""Facts, rules, episodes; memory_search, memory_recall, memory_get over HTTP (real DB, real MiniLM)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx

from tests.support import TenantFactory, TenantKeys, search


async def _store(client: httpx.AsyncClient, tenant: TenantKeys, kind: str, **body: Any) -> dict[str, Any]:
    response = await client.post(f"/v1/{kind}", json=body, headers=tenant.headers())
    assert response.status_code == 201, response.text
    stored: dict[str, Any] = response.json()
    return stored


async def _search(client: httpx.AsyncClient, tenant: TenantKeys, **body: Any) -> dict[str, Any]:
    return await search(client, tenant, **body)


def _contents(result: dict[str, Any]) -> list[str]:
    return [r["content"] for r in result["results"]]


async def test_store_fact_returns_the_stored_memory(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    fact = await _store(
        client,
        tenant,
        "facts",
        content="User's sister is called Ana",
        subject="user",
        predicate="sister",
        importance=7,
        tags=["family"],
        metadata={"source": "chat"},
    )
    assert fact["type"] == "fact"
    assert fact["confidence"] == 1.0
    assert fact["decay_rate"] == 0.008
    assert fact["validity"] == "active"
    assert fact["reference_count"] == 0
    assert fact["last_confirmed_at"] == fact["created_at"]
    rule = await _store(client, tenant, "rules", content="Never book flights before 8am")
    assert rule["confidence"] == 0.5
    episode = await _store(client, tenant, "episodes", content="Booked Luigi's", butler="concierge")
    expires = datetime.fromisoformat(episode["expires_at"]) - datetime.fromisoformat(episode["created_at"])
    assert abs(expires - timedelta(days=7)) < timedelta(seconds=5)
    got = await client.get(f"/v1/memories/{fact['id']}", headers=tenant.headers("reader"))
    assert got.json()["content"] == "User's sister is called Ana"
    assert got.json()["reference_count"] == 1
    assert got.json()["metadata"] == {"source": "chat"}


async def test_invalid_fields_are_422_and_store_nothing(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("facts", {"content": "x", "confidence": 1.5}, "confidence"),
        ("facts", {"content": "x", "decay_rate": -1}, "decay_rate"),
        ("facts", {"content": "   "}, "content"),
        ("facts", {"content": "x", "scope": "bad scope!"}, "scope"),
        ("facts", {"content": "x", "unknown_field": 1}, "unknown_field"),
        ("rules", {"content": "x", "importance": -0.5}, "importance"),
        ("episodes", {"content": "x"}, "butler"),
        ("facts", {"content": "x", "supersedes": str(uuid.uuid4())}, "supersedes"),
    ]
    for kind, body, field in cases:
        response = await client.post(f"/v1/{kind}", json=body, headers=tenant.headers())
        assert response.status_code == 422, (body, response.text)
        assert field in response.text
    too_big = await client.post(
        "/v1/facts", json={"content": "x" * (64 * 1024 + 1)}, headers=tenant.headers()
    )
    assert too_big.status_code == 422
    assert "64 KiB" in too_big.json()["error"]["message"] or "65536" in too_big.json()["error"]["message"]
    batch = await client.post(
        "/v1/memories:batch",
        json={
            "items": [{"type": "fact", "content": "fine"}, {"type": "rule", "content": "x", "confidence": 2}]
        },
        headers=tenant.headers(),
    )
    assert batch.status_code == 422
    assert "items.1" in batch.json()["error"]["message"]
    everything = await _search(client, tenant, query="fine x", mode="keyword", min_score=0)
    assert everything["results"] == []


async def test_batch_is_ordered_and_idempotent(client: httpx.AsyncClient, make_tenant: TenantFactory) -> None:
    tenant = await make_tenant()
    items = [
        {"type": "fact", "content": "The cat is called Miso", "idempotency_key": "cat"},
        {"type": "rule", "content": "Feed the cat twice a day"},
        {"type": "episode", "content": "Took Miso to the vet", "butler": "pets"},
    ]
    first = await client.post("/v1/memories:batch", json={"items": items}, headers=tenant.headers())
    assert first.status_code == 201
    stored = first.json()["items"]
    assert [m["type"] for m in stored] == ["fact", "rule", "episode"]
    assert [m["content"] for m in stored] == [i["content"] for i in items]
    retry = await client.post(
        "/v1/facts",
        json={"content": "The cat is called Miso", "idempotency_key": "cat"},
        headers=tenant.headers(),
    )
    assert retry.status_code == 201
    assert retry.json()["id"] == stored[0]["id"]
    # The key stands for that write: another body under it is a conflict, never the first memory.
    conflict = await client.post(
        "/v1/facts", json={"content": "ignored", "idempotency_key": "cat"}, headers=tenant.headers()
    )
    assert conflict.status_code == 409
    too_many = await client.post(
        "/v1/memories:batch",
        json={"items": [{"type": "fact", "content": "x"}] * 1001},
        headers=tenant.headers(),
    )
    assert too_many.status_code == 422
    assert "1000" in too_many.text


async def test_semantic_keyword_and_stemming(client: httpx.AsyncClient, make_tenant: TenantFactory) -> None:
    tenant = await make_tenant()
    await _store(client, tenant, "facts", content="User experiences nausea after dairy")
    await _store(client, tenant, "facts", content="Appointment with Dr. Smith on Tuesday")
    await _store(client, tenant, "facts", content="She runs every morning in the park")
    for i in range(8):
        await _store(client, tenant, "facts", content=f"Filler note number {i} about the garden shed")
    semantic = await _search(client, tenant, query="feeling unwell", mode="semantic", limit=3)
    assert semantic["results"][0]["content"] == "User experiences nausea after dairy"
    assert semantic["results"][0]["match_type"] == "semantic"
    keyword = await _search(client, tenant, query="Dr. Smith", mode="keyword")
    assert _contents(keyword) == ["Appointment with Dr. Smith on Tuesday"]
    assert keyword["results"][0]["match_type"] == "bm25"
    assert keyword["keyword_ranker"] == "bm25"
    stem = await _search(client, tenant, query="running", mode="keyword")
    assert _contents(stem) == ["She runs every morning in the park"]
    span = stem["results"][0]["highlights"][0]
    assert "She runs every morning in the park"[span[0] : span[1]] == "runs"
    limited = await _search(client, tenant, query="note about the garden", limit=5, min_score=0)
    assert len(limited["results"]) == 5
    alias = await _search(client, tenant, query="note about the garden", max_results=2, min_score=0)
    assert len(alias["results"]) == 2


async def test_hybrid_is_default_and_fuses_ranks(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    dairy = await _store(client, tenant, "facts", content="Milk and cheese upset the user's stomach")
    token = await _store(
        client, tenant, "facts", content="Config flag LACTOSE_MODE is intolerant of spaces in YAML"
    )
    for text in ("The user enjoys hiking", "Paris is the capital of France", "Backups run nightly"):
        await _store(client, tenant, "facts", content=text)
    result = await _search(client, tenant, query="lactose intolerant", limit=10, min_score=0, fusion="rrf")
    assert result["mode"] == "hybrid"
    by_id = {r["id"]: r for r in result["results"]}
    assert dairy["id"] in by_id and token["id"] in by_id
    assert by_id[dairy["id"]]["score_breakdown"]["ranks"] == {"keyword": None, "semantic": 1}
    assert by_id[dairy["id"]]["match_type"] == "semantic"
    assert by_id[token["id"]]["score_breakdown"]["ranks"]["keyword"] == 1
    assert by_id[token["id"]]["score_breakdown"]["ranks"]["semantic"] > 1
    for hit in result["results"]:
        ranks = hit["score_breakdown"]["ranks"]
        # A leg's missing item ranks one below the legs' depth (100, whatever the limit).
        k, depth = 60, 100
        semantic_rank = ranks["semantic"] or depth + 1
        keyword_rank = ranks["keyword"] or depth + 1
        expected = (1 / (k + semantic_rank) + 1 / (k + keyword_rank)) / (2 / (k + 1))
        assert abs(hit["score"] - expected) < 1e-5
    # Unsent, the fusion is the adaptive default: both legs speak, with this query's shares.
    default = await _search(client, tenant, query="lactose intolerant", limit=10, min_score=0)
    breakdown = default["results"][0]["score_breakdown"]
    assert breakdown["fusion"] == "adaptive"
    assert 0.2 <= breakdown["weights"]["semantic"] <= 0.8
    assert abs(breakdown["weights"]["semantic"] + breakdown["weights"]["keyword"] - 1) < 1e-5
    assert {r["id"] for r in default["results"]} >= {dairy["id"], token["id"]}


async def test_recall_ranks_by_importance_and_recency_and_imports_butler_toml(
    client: httpx.AsyncClient, make_tenant: TenantFactory, admin_conn: asyncpg.Connection, tmp_path: Any
) -> None:
    tenant = await make_tenant()
    created = datetime.now(UTC) - timedelta(days=40)
    important = await _store(
        client,
        tenant,
        "facts",
        content="User takes vitamin D every morning",
        importance=9,
        created_at=created.isoformat(),
        scope="health",
    )
    # Other words: one recall answer never shows the same words twice (R-M7).
    trivial = await _store(
        client,
        tenant,
        "facts",
        content="User takes vitamin D every single morning",
        importance=2,
        created_at=created.isoformat(),
        scope="health",
    )
    now = datetime.now(UTC)
    await admin_conn.execute(
        "UPDATE memory SET last_referenced_at = $2 WHERE id = $1",
        uuid.UUID(important["id"]),
        now - timedelta(days=1),
    )
    await admin_conn.execute(
        "UPDATE memory SET last_referenced_at = $2 WHERE id = $1",
        uuid.UUID(trivial["id"]),
        now - timedelta(days=30),
    )
    recall = await client.post("/v1/recall", json={"topic": "vitamin D"}, headers=tenant.headers("reader"))
    assert recall.status_code == 200
    results = recall.json()["results"]
    assert [r["id"] for r in results] == [important["id"], trivial["id"]]
    assert results[0]["relevance"] >= results[1]["relevance"]
    assert results[0]["importance"] == 9 and results[0]["recency"] > results[1]["recency"]
    assert recall.json()["weights"] == {
        "relevance": 0.4,
        "importance": 0.3,
        "recency": 0.2,
        "confidence": 0.1,
    }
    for r in results:
        composite = 0.4 * r["relevance"] + 0.3 * r["importance"] / 10 + 0.2 * r["recency"]
        assert abs(r["score"] - (composite + 0.1 * r["effective_confidence"])) < 1e-5
    # recency = exp(−ln 2 / 7 · days since last referenced): 1 day → 0.906, 30 days → 0.051.
    assert abs(results[0]["recency"] - 0.5 ** (1 / 7)) < 1e-3
    assert abs(results[1]["recency"] - 0.5 ** (30 / 7)) < 1e-3
    # Imported weights that only value confidence, and an older confirmation of the important fact.
    await admin_conn.execute(
        "UPDATE memory SET last_confirmed_at = now() - interval '60 days' WHERE id = $1",
        uuid.UUID(important["id"]),
    )
    toml = (
        '[butler]\nname = "health"\n\n[butler.memory.retrieval]\n'
        "score_weights = { relevance = 0.0, importance = 0.0, recency = 0.0, confidence = 1.0 }\n"
    )
    put = await client.put(
        "/v1/scopes/health/settings",
        content=toml,
        headers={**tenant.headers("admin"), "Content-Type": "application/toml"},
    )
    assert put.status_code == 200, put.text
    scoped = await client.post(
        "/v1/recall", json={"topic": "vitamin D", "scope": "health"}, headers=tenant.headers("reader")
    )
    assert [r["id"] for r in scoped.json()["results"]] == [trivial["id"], important["id"]]
    assert scoped.json()["weights"]["confidence"] == 1.0


async def test_scope_filters_facts_and_episodes(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    await _store(client, tenant, "facts", content="Coffee order: flat white", scope="global")
    await _store(client, tenant, "facts", content="Coffee makes the user jittery", scope="health")
    await _store(client, tenant, "facts", content="Coffee machine is in the kitchen", scope="general")
    await _store(client, tenant, "episodes", content="Coffee with the doctor", butler="health")
    await _store(client, tenant, "episodes", content="Coffee beans ordered", butler="general")
    health = await _search(client, tenant, query="coffee", scope="health", min_score=0)
    assert sorted(_contents(health)) == [
        "Coffee makes the user jittery",
        "Coffee order: flat white",
        "Coffee with the doctor",
    ]
    everything = await _search(client, tenant, query="coffee", min_score=0)
    assert len(everything["results"]) == 5
    recall = await client.post(
        "/v1/recall", json={"topic": "coffee", "scope": "health"}, headers=tenant.headers()
    )
    assert sorted(r["content"] for r in recall.json()["results"]) == [
        "Coffee makes the user jittery",
        "Coffee order: flat white",
    ]


async def test_faded_confidence_is_filtered_unless_asked(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    # 0.3 · exp(−0.008 · 86.64) = 0.15
    confirmed = datetime.now(UTC) - timedelta(days=86.64)
    faded = await _store(
        client,
        tenant,
        "facts",
        content="User used to live in Lisbon",
        confidence=0.3,
        last_confirmed_at=confirmed.isoformat(),
    )
    assert abs(faded["effective_confidence"] - 0.15) < 0.001
    default = await _search(client, tenant, query="Lisbon", min_score=0)
    assert default["results"] == []
    kept = await _search(client, tenant, query="Lisbon", min_score=0, min_confidence=0)
    assert _contents(kept) == ["User used to live in Lisbon"]
    recall = await client.post(
        "/v1/recall", json={"topic": "Lisbon", "min_confidence": 0}, headers=tenant.headers()
    )
    assert [r["id"] for r in recall.json()["results"]] == [faded["id"]]
    assert (await client.post("/v1/recall", json={"topic": "Lisbon"}, headers=tenant.headers())).json()[
        "results"
    ] == []
    confirm = await client.post(f"/v1/memories/{faded['id']}/confirm", headers=tenant.headers())
    assert confirm.status_code == 200
    assert abs(confirm.json()["effective_confidence"] - 0.3) < 0.001
    assert _contents(await _search(client, tenant, query="Lisbon", min_score=0)) == [
        "User used to live in Lisbon"
    ]


async def test_reference_bump_and_tie_order(
    client: httpx.AsyncClient, make_tenant: TenantFactory, admin_conn: asyncpg.Connection
) -> None:
    tenant = await make_tenant()
    fact = await _store(client, tenant, "facts", content="The garage code is 1234")
    await admin_conn.execute("UPDATE memory SET reference_count = 3 WHERE id = $1", uuid.UUID(fact["id"]))
    before = datetime.now(UTC)
    recall = await client.post("/v1/recall", json={"topic": "garage code"}, headers=tenant.headers())
    hit = recall.json()["results"][0]
    assert hit["reference_count"] == 4
    assert datetime.fromisoformat(hit["last_referenced_at"]) >= before - timedelta(seconds=1)
    row = await admin_conn.fetchrow("SELECT reference_count FROM memory WHERE id = $1", uuid.UUID(fact["id"]))
    assert row is not None and row["reference_count"] == 4

    same_time = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    # Same words about three subjects: not duplicates (R-M7), and the same score.
    twins = [
        await _store(
            client,
            tenant,
            "facts",
            content="Twin fact about the blue boat",
            created_at=same_time,
            subject=f"boat {n}",
        )
        for n in range(3)
    ]
    newest = await _store(client, tenant, "facts", content="Twin fact about the blue boat")
    result = await _search(client, tenant, query="blue boat", min_score=0)
    ids = [r["id"] for r in result["results"] if r["content"] == "Twin fact about the blue boat"]
    # One answer never shows the same words twice (R-M7): the first in the tie order stands for all.
    assert ids == [newest["id"]]
    assert len(twins) == 3
    again = await _search(client, tenant, query="blue boat", min_score=0)
    assert [r["id"] for r in again["results"] if r["content"] == "Twin fact about the blue boat"] == ids


async def test_expired_episodes_and_superseded_facts_stay_hidden(
    client: httpx.AsyncClient, make_tenant: TenantFactory, admin_conn: asyncpg.Connection
) -> None:
    tenant = await make_tenant()
    expired = await _store(
        client,
        tenant,
        "episodes",
        content="Parked the car on level 3",
        butler="car",
        expires_at=(datetime.now(UTC) + timedelta(minutes=1)).isoformat(),
    )
    # An expires_at in the past is refused at the door, so the clock is moved on in the database.
    await admin_conn.execute(
        "UPDATE memory SET expires_at = now() - interval '1 minute' WHERE id = $1", uuid.UUID(expired["id"])
    )
    assert (await _search(client, tenant, query="parked car level", min_score=0))["results"] == []
    by_id = await client.get(f"/v1/memories/{expired['id']}", headers=tenant.headers("reader"))
    missing = await client.get(f"/v1/memories/{uuid.uuid4()}", headers=tenant.headers("reader"))
    assert by_id.status_code == 404
    assert by_id.json() == missing.json()
    old = await _store(client, tenant, "facts", content="User's phone number ends in 11")
    new = await _store(
        client, tenant, "facts", content="User's phone number ends in 42", supersedes=old["id"]
    )
    got = await client.get(f"/v1/memories/{old['id']}", headers=tenant.headers())
    assert got.json()["validity"] == "superseded"
    recall = await client.post("/v1/recall", json={"topic": "phone number"}, headers=tenant.headers())
    assert [r["id"] for r in recall.json()["results"]] == [new["id"]]


async def test_forget_deletes(client: httpx.AsyncClient, make_tenant: TenantFactory) -> None:
    tenant = await make_tenant()
    fact = await _store(client, tenant, "facts", content="Temporary wifi password is hunter2")
    assert (
        await client.delete(f"/v1/memories/{fact['id']}", headers=tenant.headers("reader"))
    ).status_code == 403
    assert (await client.delete(f"/v1/memories/{fact['id']}", headers=tenant.headers())).status_code == 204
    assert (await client.get(f"/v1/memories/{fact['id']}", headers=tenant.headers())).status_code == 404
    assert (await client.delete(f"/v1/memories/{fact['id']}", headers=tenant.headers())).status_code == 404


async def test_cross_tenant_search_needs_operator_key(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    plain = await make_tenant("plain")
    other = await make_tenant("other")
    operator = await make_tenant("op", operator=True)
    await _store(client, other, "facts", content="Quarterly revenue grew eleven percent")
    denied = await client.post(
        "/v1/search", json={"query": "revenue", "all_tenants": True}, headers=plain.headers("reader")
    )
    assert denied.status_code == 403
    denied_named = await client.post(
        "/v1/search", json={"query": "revenue", "tenants": [other.name]}, headers=plain.headers("reader")
    )
    assert denied_named.status_code == 403
    own_only = await _search(client, operator, query="revenue", min_score=0)
    assert own_only["results"] == []
    across = await client.post(
        "/v1/search",
        json={"query": "revenue", "tenants": [other.name], "min_score": 0},
        headers=operator.headers("reader"),
    )
    assert across.status_code == 200
    assert [r["content"] for r in across.json()["results"]] == ["Quarterly revenue grew eleven percent"]


async def test_a_long_faded_fact_does_not_break_search(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    # decay_rate 10/day, last confirmed 120 days ago: exp(-1200) is below float range.
    confirmed = (datetime.now(UTC) - timedelta(days=120)).isoformat()
    await _store(
        client,
        tenant,
        "facts",
        content="Milk in the fridge is fresh",
        decay_rate=10,
        last_confirmed_at=confirmed,
    )
    await _store(client, tenant, "facts", content="The fridge is in the kitchen")
    found = await client.post("/v1/search", json={"query": "fridge"}, headers=tenant.headers("reader"))
    assert found.status_code == 200
    assert _contents(found.json()) == ["The fridge is in the kitchen"]
    recalled = await client.post("/v1/recall", json={"topic": "fridge"}, headers=tenant.headers("reader"))
    assert recalled.status_code == 200
