"""Keyword postings in blocks (migration 0013): compaction changes no ranking, deletes and new text stay exact."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import httpx
import pytest

from app.state import ServiceState
from recalld_tools.evaluation.bench import generate_memories, generate_queries
from tests.support import TenantFactory, TenantKeys

CORPUS = generate_memories(120, seed=3)
QUERIES = generate_queries(12, seed=5)


async def _batch(client: httpx.AsyncClient, tenant: TenantKeys, contents: list[str]) -> list[str]:
    items = [{"type": "fact", "content": c} for c in contents]
    response = await client.post("/v1/memories:batch", json={"items": items}, headers=tenant.headers())
    assert response.status_code == 201, response.text
    return [item["id"] for item in response.json()["items"]]


async def _keyword(
    client: httpx.AsyncClient, tenant: TenantKeys, query: str, **body: Any
) -> list[tuple[str, str, float]]:
    response = await client.post(
        "/v1/search",
        json={"query": query, "mode": "keyword", "min_score": 0, "limit": 100, **body},
        headers=tenant.headers("reader"),
    )
    assert response.status_code == 200, response.text
    return [
        (r["id"], r["content"], r["score_breakdown"]["raw_scores"]["keyword"])
        for r in response.json()["results"]
    ]


async def _rankings(client: httpx.AsyncClient, tenant: TenantKeys) -> dict[str, list[tuple[str, str, float]]]:
    """Every query's results, exact and with the per-lexeme cut forced to its minimum."""
    out = {}
    for query in QUERIES:
        out[f"exact {query}"] = await _keyword(client, tenant, query, exact=True)
        out[f"pruned {query}"] = await _keyword(client, tenant, query, limit=10)
    return out


async def _layout(conn: asyncpg.Connection, tenant_id: str) -> dict[str, int]:
    tenant = uuid.UUID(tenant_id)
    return {
        "delta": await conn.fetchval("SELECT count(*) FROM keyword_posting WHERE tenant_id = $1", tenant),
        "blocked": await conn.fetchval(
            "SELECT coalesce(sum(cardinality(memory_ids)), 0) FROM keyword_block WHERE tenant_id = $1", tenant
        ),
        "stale": await conn.fetchval("SELECT count(*) FROM keyword_stale WHERE tenant_id = $1", tenant),
    }


async def _compact(conn: asyncpg.Connection, tenant_id: str) -> None:
    await conn.execute("SELECT keyword_compact($1)", uuid.UUID(tenant_id))


def _by_content(results: list[tuple[str, str, float]]) -> dict[str, float]:
    return {content: score for _, content, score in results}


@pytest.fixture
def forced_cut(service: ServiceState, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pruned searches read 20 postings per lexeme (twice the limit) whatever the query's size."""
    monkeypatch.setattr(service.settings, "keyword_postings_per_lexeme", 1)
    monkeypatch.setattr(service.settings, "keyword_exact_max_postings", 0)


async def test_compaction_changes_no_ranking(
    client: httpx.AsyncClient, make_tenant: TenantFactory, admin_conn: asyncpg.Connection, forced_cut: None
) -> None:
    tenant = await make_tenant()
    await _batch(client, tenant, CORPUS[:60])
    await _batch(client, tenant, CORPUS[60:100])
    # Ids are random, so any write may have compacted (one row in 128): the last memories go in
    # one at a time until some postings are still in the delta, whatever was compacted before.
    for content in CORPUS[100:]:
        await _batch(client, tenant, [content])
    before = await _layout(admin_conn, tenant.id)
    while before["delta"] == 0:
        await _batch(client, tenant, [f"{CORPUS[0]} again {before['blocked']}"])
        before = await _layout(admin_conn, tenant.id)
    in_delta = await _rankings(client, tenant)
    await _compact(admin_conn, tenant.id)
    assert await _layout(admin_conn, tenant.id) == {
        "delta": 0,
        "blocked": before["blocked"] + before["delta"],
        "stale": 0,
    }
    in_blocks = await _rankings(client, tenant)
    assert sum(len(r) for r in in_delta.values()) > 10 * len(QUERIES)
    for query, results in in_delta.items():
        assert [(i, c) for i, c, _ in in_blocks[query]] == [(i, c) for i, c, _ in results], query
        assert [s for _, _, s in in_blocks[query]] == pytest.approx([s for _, _, s in results], abs=1e-9), (
            query
        )
    # Half in blocks, half in the delta: still the same.
    more = await _batch(client, tenant, generate_memories(40, seed=4))
    mixed = await _rankings(client, tenant)
    await _compact(admin_conn, tenant.id)
    compacted = await _rankings(client, tenant)
    for query, results in mixed.items():
        assert [i for i, _, _ in compacted[query]] == [i for i, _, _ in results], query
    assert any(i in more for results in compacted.values() for i, _, _ in results)


async def test_deletes_and_new_text_after_compaction_score_like_a_fresh_tenant(
    client: httpx.AsyncClient, make_tenant: TenantFactory, admin_conn: asyncpg.Connection, forced_cut: None
) -> None:
    tenant, fresh = await make_tenant(), await make_tenant()
    ids = await _batch(client, tenant, CORPUS)
    await _compact(admin_conn, tenant.id)
    for memory_id in ids[:10]:
        assert (await client.delete(f"/v1/memories/{memory_id}", headers=tenant.headers())).status_code == 204
    new_text = "the walrus keeper forgot the deploy pipeline and the VPN config"
    await admin_conn.execute(
        "UPDATE memory SET search_text = $3 WHERE tenant_id = $1 AND id = $2",
        uuid.UUID(tenant.id),
        uuid.UUID(ids[10]),
        new_text,
    )
    layout = await _layout(admin_conn, tenant.id)
    assert layout["stale"] > 0 and layout["delta"] > 0  # the new text's postings
    # The same final corpus written straight into another tenant: every memory scores the same.
    await _batch(client, fresh, [*CORPUS[11:], new_text])
    assert (await _keyword(client, tenant, "walrus keeper", exact=True))[0][0] == ids[10]
    for step in ("stale", "compacted"):
        for query in (*QUERIES, "walrus deploy"):
            exact = await _keyword(client, tenant, query, exact=True)
            assert {i for i, _, _ in exact} <= set(ids[10:]), (step, query)
            got = {(new_text if i == ids[10] else c): s for i, c, s in exact}
            expected = _by_content(await _keyword(client, fresh, query, exact=True))
            assert got == pytest.approx(expected, abs=1e-9), (step, query)
            # The cut's rows are live ones, scored as exact BM25 scores them (no stale posting counts).
            exact_score = {i: s for i, _, s in exact}
            for i, _, s in await _keyword(client, tenant, query, limit=10):
                assert s == pytest.approx(exact_score[i], abs=1e-9), (step, query)
        await _compact(admin_conn, tenant.id)
    assert await _layout(admin_conn, tenant.id) == {
        "delta": 0,
        "blocked": layout["blocked"] + layout["delta"] - layout["stale"],
        "stale": 0,
    }
    left = await admin_conn.fetchval(
        "SELECT count(*) FROM keyword_block k CROSS JOIN LATERAL unnest(k.memory_ids) AS u(id) "
        "WHERE k.tenant_id = $1 AND u.id = ANY($2::uuid[])",
        uuid.UUID(tenant.id),
        [uuid.UUID(i) for i in ids[:10]],
    )
    assert left == 0


async def test_an_insert_whose_id_is_chosen_moves_its_tenants_delta_into_blocks(
    client: httpx.AsyncClient, make_tenant: TenantFactory, admin_conn: asyncpg.Connection
) -> None:
    tenant, quiet = await make_tenant(), await make_tenant()
    await _batch(client, quiet, CORPUS[:20])
    quiet_before = await _layout(admin_conn, quiet.id)
    texts = generate_memories(300, seed=9)
    for start in range(0, 300, 100):
        await _batch(client, tenant, texts[start : start + 100])
    # About one row in 128 (by its id's hash) compacts its tenant; write one such row directly.
    chosen = await admin_conn.fetchval(
        "SELECT id FROM (SELECT gen_random_uuid() AS id FROM generate_series(1, 5000)) g "
        "WHERE hashtext(id::text) & 127 = 0 LIMIT 1"
    )
    await admin_conn.execute(
        "INSERT INTO memory (tenant_id, id, kind, content, search_text, confidence, decay_rate, validity, "
        "last_confirmed_at) VALUES ($1, $2, 'fact', $3, $3, 0.9, 0, 'active', now())",
        uuid.UUID(tenant.id),
        chosen,
        "the chosen walrus",
    )
    layout = await _layout(admin_conn, tenant.id)
    assert layout["delta"] == 0 and layout["blocked"] > 300
    assert await _layout(admin_conn, quiet.id) == quiet_before
    sizes = await admin_conn.fetch(
        "SELECT cardinality(memory_ids) AS n, cardinality(term_frequencies) AS t, "
        "cardinality(document_lengths) AS d FROM keyword_block WHERE tenant_id = $1",
        uuid.UUID(tenant.id),
    )
    assert all(0 < r["n"] <= 64 and r["n"] == r["t"] == r["d"] for r in sizes)
    hits = await _keyword(client, tenant, texts[7])
    assert hits and hits[0][1] == texts[7]
    assert (await _keyword(client, tenant, "chosen walrus"))[0][0] == str(chosen)


async def test_the_impact_is_the_rounded_fraction_migration_0006_defined(
    admin_conn: asyncpg.Connection,
) -> None:
    # Stored impacts order each lexeme's postings and were written by the numeric definition; the
    # integer one (0016) must give the same smallint for every term frequency a tsvector allows
    # (<= 256 positions) over short and long documents.
    differing = await admin_conn.fetchval(
        """
        SELECT count(*) FROM generate_series(1, 256) tf,
            (SELECT generate_series(0, 3000) UNION ALL SELECT generate_series(3001, 1048576, 257)) d(dl)
        WHERE keyword_impact(tf, dl)
              <> round(32767.0 * tf / (tf + 1.2 * (0.25 + 0.75 * dl / 16.0)))::smallint
        """
    )
    assert differing == 0
