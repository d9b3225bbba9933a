"""Auth, roles, error format, health and tenant isolation (API and row-level security)."""

from __future__ import annotations

import uuid

import asyncpg
import httpx
import psutil
import pytest

from app.infra.db import tenant_transaction
from tests.support import TenantFactory


async def test_healthz_and_readyz(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200
    body = ready.json()
    assert body["status"] == "ready"
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["migrations"]["current"] == body["checks"]["migrations"]["head"]
    assert body["checks"]["embedder"]["loaded"] is True
    assert body["checks"]["embedder"]["model"] == "all-MiniLM-L6-v2"
    assert body["checks"]["keyword_ranker"] == "bm25"


async def test_embedded_postgres_buffer_cache_is_sized_to_the_machine(admin_conn: asyncpg.Connection) -> None:
    ram_mb = psutil.virtual_memory().total // 2**20
    expected_mb = max(128, min(ram_mb // 8, 1024))
    shown = await admin_conn.fetchval("SHOW shared_buffers")
    assert shown == (f"{expected_mb // 1024}GB" if expected_mb % 1024 == 0 else f"{expected_mb}MB")


async def test_embedded_postgres_preloads_nothing_unused(admin_conn: asyncpg.Connection) -> None:
    # pg_textsearch is not used by any query: loading it into every backend was dead weight.
    assert await admin_conn.fetchval("SHOW shared_preload_libraries") == ""
    assert await admin_conn.fetchval("SHOW synchronous_commit") == "on"


async def test_missing_and_bad_keys_are_401(client: httpx.AsyncClient) -> None:
    body = {"query": "anything"}
    missing = await client.post("/v1/search", json=body)
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "unauthorized"
    bad = await client.post("/v1/search", json=body, headers={"Authorization": "Bearer rk_nope_nope"})
    assert bad.status_code == 401
    wrong_scheme = await client.post("/v1/search", json=body, headers={"Authorization": "Basic abc"})
    assert wrong_scheme.status_code == 401


async def test_roles_are_enforced(client: httpx.AsyncClient, make_tenant: TenantFactory) -> None:
    tenant = await make_tenant()
    fact = {"content": "The office is closed on Mondays"}
    reader_write = await client.post("/v1/facts", json=fact, headers=tenant.headers("reader"))
    assert reader_write.status_code == 403
    assert reader_write.json()["error"]["code"] == "forbidden"
    writer_settings = await client.put(
        "/v1/scopes/health/settings", json={"half_life_days": 10}, headers=tenant.headers("writer")
    )
    assert writer_settings.status_code == 403
    admin_settings = await client.put(
        "/v1/scopes/health/settings", json={"half_life_days": 10}, headers=tenant.headers("admin")
    )
    assert admin_settings.status_code == 200
    assert (await client.post("/v1/facts", json=fact, headers=tenant.headers("writer"))).status_code == 201
    reader_search = await client.post(
        "/v1/search", json={"query": "office"}, headers=tenant.headers("reader")
    )
    assert reader_search.status_code == 200


async def test_revoked_key_stops_working_at_once(
    client: httpx.AsyncClient, make_tenant: TenantFactory, admin_conn: asyncpg.Connection
) -> None:
    tenant = await make_tenant()
    assert (
        await client.post("/v1/search", json={"query": "x"}, headers=tenant.headers("reader"))
    ).status_code == 200
    prefix = tenant.reader.removeprefix("rk_").split("_")[0]
    await admin_conn.execute("UPDATE api_key SET revoked_at = now() WHERE prefix = $1", prefix)
    after = await client.post("/v1/search", json={"query": "x"}, headers=tenant.headers("reader"))
    assert after.status_code == 401
    assert after.json()["error"]["message"] == "invalid or revoked API key"


async def test_framework_errors_use_the_json_error_shape(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    unknown = await client.get("/v1/nope", headers=tenant.headers())
    assert unknown.status_code == 404
    assert set(unknown.json()["error"]) == {"code", "message", "details"}
    wrong_method = await client.get("/v1/facts", headers=tenant.headers())
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["code"] == "method_not_allowed"
    invalid = await client.post(
        "/v1/facts", json={"content": "x", "importance": 11}, headers=tenant.headers()
    )
    assert invalid.status_code == 422
    error = invalid.json()["error"]
    assert error["code"] == "validation_error"
    assert "importance" in error["message"]
    assert error["details"][0]["loc"][-1] == "importance"
    bad_uuid = await client.get("/v1/memories/not-a-uuid", headers=tenant.headers())
    assert bad_uuid.status_code == 422


async def test_tenant_never_sees_another_tenants_memories(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    a = await make_tenant("a")
    b = await make_tenant("b")
    secret = await client.post(
        "/v1/facts", json={"content": "Tenant B's launch code is zebra-42"}, headers=b.headers()
    )
    secret_id = secret.json()["id"]
    assert (await client.get(f"/v1/memories/{secret_id}", headers=b.headers())).status_code == 200
    as_a = await client.get(f"/v1/memories/{secret_id}", headers=a.headers())
    missing = await client.get(f"/v1/memories/{uuid.uuid4()}", headers=a.headers())
    assert as_a.status_code == missing.status_code == 404
    assert as_a.json() == missing.json()
    for mode in ("hybrid", "keyword", "semantic"):
        found = await client.post(
            "/v1/search",
            json={"query": "launch code zebra", "mode": mode, "min_score": 0},
            headers=a.headers(),
        )
        assert found.status_code == 200
        assert found.json()["results"] == []
    recall = await client.post("/v1/recall", json={"topic": "launch code zebra"}, headers=a.headers())
    assert recall.json()["results"] == []
    assert (await client.delete(f"/v1/memories/{secret_id}", headers=a.headers())).status_code == 404
    assert (await client.post(f"/v1/memories/{secret_id}/confirm", headers=a.headers())).status_code == 404
    assert (await client.get(f"/v1/memories/{secret_id}", headers=b.headers())).status_code == 200


async def test_row_level_security_alone_hides_other_tenants(
    client: httpx.AsyncClient, make_tenant: TenantFactory, serving_conn: asyncpg.Connection
) -> None:
    a = await make_tenant("a")
    b = await make_tenant("b")
    await client.post("/v1/facts", json={"content": "a's row"}, headers=a.headers())
    await client.post("/v1/facts", json={"content": "b's row"}, headers=b.headers())
    # The tenant filter is deliberately missing from these statements: only RLS bounds them.
    async with tenant_transaction(serving_conn, [a.id]):
        rows = await serving_conn.fetch("SELECT tenant_id, content FROM memory")
        assert {str(r["tenant_id"]) for r in rows} == {a.id}
        assert [r["content"] for r in rows] == ["a's row"]
        # A row's postings sit in the delta or, once a compaction picked them up, in blocks.
        postings = await serving_conn.fetch(
            "SELECT tenant_id FROM keyword_posting UNION SELECT tenant_id FROM keyword_block"
        )
        assert {str(r["tenant_id"]) for r in postings} == {a.id}
        updated = await serving_conn.execute("UPDATE memory SET importance = 1 WHERE content = 'b''s row'")
        assert updated == "UPDATE 0"
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            async with serving_conn.transaction():  # savepoint: the outer transaction stays usable
                await serving_conn.execute(
                    "INSERT INTO memory (tenant_id, id, kind, content, search_text, butler, expires_at) "
                    "VALUES ($1, $2, 'episode', 'forged', 'forged', 'x', now())",
                    uuid.UUID(b.id),
                    uuid.uuid4(),
                )
    async with tenant_transaction(serving_conn, []):
        assert await serving_conn.fetchval("SELECT count(*) FROM memory") == 0


async def test_settings_batches_listings_and_idempotency_keys_stay_in_their_tenant(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    a = await make_tenant("a")
    b = await make_tenant("b")
    weights = {"relevance": 0.9, "importance": 0.0, "recency": 0.0, "confidence": 0.1}
    put = await client.put(
        "/v1/scopes/health/settings", json={"score_weights": weights}, headers=a.headers("admin")
    )
    assert put.status_code == 200
    assert (await client.get("/v1/scopes/health/settings", headers=b.headers("reader"))).json() == {}
    recall_b = await client.post(
        "/v1/recall", json={"topic": "x", "scope": "health"}, headers=b.headers("reader")
    )
    assert recall_b.json()["weights"] == {
        "relevance": 0.4,
        "importance": 0.3,
        "recency": 0.2,
        "confidence": 0.1,
    }

    batch = await client.post(
        "/v1/memories:batch",
        json={
            "items": [{"type": "fact", "content": "A's batch fact about the quokka", "idempotency_key": "k1"}]
        },
        headers=a.headers(),
    )
    a_fact = batch.json()["items"][0]
    # The same idempotency key in another tenant is a new write, not A's memory.
    b_write = await client.post(
        "/v1/facts", json={"content": "B's own fact", "idempotency_key": "k1"}, headers=b.headers()
    )
    assert b_write.status_code == 201
    assert b_write.json()["id"] != a_fact["id"] and b_write.json()["content"] == "B's own fact"
    assert (await client.get(f"/v1/memories/{a_fact['id']}", headers=b.headers())).status_code == 404
    quokka = await client.post("/v1/search", json={"query": "quokka", "min_score": 0}, headers=b.headers())
    assert [r["content"] for r in quokka.json()["results"]] == ["B's own fact"]

    await client.put("/v1/documents", json={"path": "MEMORY.md", "content": "A's notes"}, headers=a.headers())
    assert (await client.get("/v1/documents:list", headers=b.headers())).json() == {"documents": []}
    assert [
        d["path"] for d in (await client.get("/v1/documents:list", headers=a.headers())).json()["documents"]
    ] == ["MEMORY.md"]

    denied = await client.post(
        "/v1/recall", json={"topic": "quokka", "all_tenants": True}, headers=b.headers("admin")
    )
    assert denied.status_code == 403
    assert denied.json()["error"]["message"] == "cross-tenant retrieval needs an operator key"
