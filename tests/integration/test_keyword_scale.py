"""Keyword leg at scale: pruned BM25 agrees with exact BM25, and the write-time statistics stay exact."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from app.services import tenants as tenant_service
from app.state import ServiceState
from tests.support import TenantFactory, TenantKeys


async def _batch(client: httpx.AsyncClient, tenant: TenantKeys, contents: list[str]) -> list[str]:
    items = [{"type": "fact", "content": c} for c in contents]
    response = await client.post("/v1/memories:batch", json={"items": items}, headers=tenant.headers())
    assert response.status_code == 201, response.text
    return [item["id"] for item in response.json()["items"]]


async def _keyword(
    client: httpx.AsyncClient, tenant: TenantKeys, query: str, **body: Any
) -> list[tuple[str, float]]:
    response = await client.post(
        "/v1/search",
        json={"query": query, "mode": "keyword", "min_score": 0, **body},
        headers=tenant.headers("reader"),
    )
    assert response.status_code == 200, response.text
    return [(r["id"], r["score_breakdown"]["raw_scores"]["keyword"]) for r in response.json()["results"]]


async def test_pruned_keyword_ranking_equals_exact_bm25(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    service: ServiceState,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tenant = await make_tenant()
    # Many short rows hold the common word, so its best postings (the shortest rows) fill the
    # per-lexeme cut; the rows that also hold the rare words are longer and sit deep in its list.
    await _batch(client, tenant, ["otter " + " ".join(f"w{j}" for j in range(i % 8)) for i in range(80)])
    both = await _batch(
        client,
        tenant,
        [
            f"A long note about the river otter and the rare {word} seen near the old mill at dusk"
            for word in ("kingfisher", "kingfisher heron", "heron", "kingfisher otter heron")
        ],
    )
    queries = ("otter kingfisher", "kingfisher heron otter", "otter", "heron otter mill")
    monkeypatch.setattr(service.settings, "keyword_postings_per_lexeme", 0)
    exact = {q: await _keyword(client, tenant, q, limit=10) for q in queries}
    monkeypatch.setattr(service.settings, "keyword_postings_per_lexeme", 1)
    monkeypatch.setattr(service.settings, "keyword_exact_max_postings", 0)
    pruned = {q: await _keyword(client, tenant, q, limit=10) for q in queries}
    for query in queries:
        # Same scores in the same order; the short rows tie among themselves (which of the tied
        # come first may differ), the rows with the rare words must sit where exact BM25 puts them.
        assert [s for _, s in pruned[query]] == pytest.approx([s for _, s in exact[query]], abs=1e-9), query
        assert [i if i in both else None for i, _ in pruned[query]] == [
            i if i in both else None for i, _ in exact[query]
        ], query
    # The rows with the rare words lead, scored with every query word they hold, not only the
    # words whose postings were read.
    assert exact["kingfisher heron otter"][0][0] == both[3]
    assert {i for i, _ in exact["otter kingfisher"][:3]} == {both[0], both[1], both[3]}


async def test_pruned_keyword_leg_reads_deeper_when_filters_are_selective(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    service: ServiceState,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(service.settings, "keyword_postings_per_lexeme", 1)
    monkeypatch.setattr(service.settings, "keyword_exact_max_postings", 0)
    tenant = await make_tenant()
    await _batch(client, tenant, [f"walrus walrus {i}" for i in range(400)])
    episodes = [
        {
            "type": "episode",
            "butler": "zoo",
            "content": f"On a long afternoon tour number {i} the keeper fed one walrus",
        }
        for i in range(6)
    ]
    response = await client.post("/v1/memories:batch", json={"items": episodes}, headers=tenant.headers())
    assert response.status_code == 201
    wanted = {item["id"] for item in response.json()["items"]}
    found = await _keyword(client, tenant, "walrus", types=["episode"], limit=5)
    assert len(found) == 5 and {i for i, _ in found} <= wanted


async def _statistics_match_the_rows(conn: asyncpg.Connection, tenant_id: str) -> None:
    tenant = uuid.UUID(tenant_id)
    kept = await conn.fetch(
        "SELECT lexeme, sum(documents) AS n FROM keyword_lexeme_stat WHERE tenant_id = $1 "
        "GROUP BY lexeme HAVING sum(documents) <> 0 ORDER BY lexeme",
        tenant,
    )
    counted = await conn.fetch(
        "SELECT t.lexeme, count(*) AS n FROM memory m CROSS JOIN LATERAL unnest(tsvector_to_array(m.search_vector)) "
        "AS t(lexeme) WHERE m.tenant_id = $1 GROUP BY t.lexeme ORDER BY t.lexeme",
        tenant,
    )
    assert [(r["lexeme"], r["n"]) for r in kept] == [(r["lexeme"], r["n"]) for r in counted]
    corpus = await conn.fetchrow(
        "SELECT coalesce(sum(documents), 0) AS n, coalesce(sum(total_length), 0) AS total "
        "FROM keyword_corpus_stat WHERE tenant_id = $1",
        tenant,
    )
    rows = await conn.fetchrow(
        "SELECT count(*) AS n, coalesce(sum(length(search_vector)), 0) AS total FROM memory WHERE tenant_id = $1",
        tenant,
    )
    assert corpus is not None and rows is not None
    assert (corpus["n"], corpus["total"]) == (rows["n"], rows["total"])
    # Live postings: the delta, and the blocks without the rows deleted or re-indexed since.
    postings = await conn.fetchval(
        "SELECT (SELECT count(*) FROM keyword_posting WHERE tenant_id = $1) + (SELECT count(*) FROM keyword_block k "
        "CROSS JOIN LATERAL unnest(k.memory_ids) AS u(id) WHERE k.tenant_id = $1 AND NOT EXISTS "
        "(SELECT 1 FROM keyword_stale s WHERE s.tenant_id = $1 AND s.memory_id = u.id))",
        tenant,
    )
    assert postings == sum(r["n"] for r in counted)


async def test_keyword_statistics_follow_inserts_deletes_and_text_changes(
    client: httpx.AsyncClient, make_tenant: TenantFactory, admin_conn: asyncpg.Connection
) -> None:
    tenant = await make_tenant()
    other = await make_tenant()
    ids = await _batch(
        client, tenant, [f"The glacier report {i} mentions crevasses and seracs" for i in range(30)]
    )
    await _batch(client, other, ["glacier glacier crevasses"] * 5)
    await _statistics_match_the_rows(admin_conn, tenant.id)
    # Half the rows' postings into blocks (migration 0013), the other half's left in the delta.
    await admin_conn.execute("SELECT keyword_compact($1)", uuid.UUID(tenant.id))
    recent = await _batch(
        client, tenant, [f"The glacier report {i} mentions crevasses and seracs" for i in range(30, 45)]
    )
    for memory_id in [*ids[:7], *recent[:3]]:
        assert (await client.delete(f"/v1/memories/{memory_id}", headers=tenant.headers())).status_code == 204
    for content in (
        "# Notes\n\nThe glacier moved.\n",
        "# Notes\n\nThe moraine is new.\n\nNo glacier here.\n",
    ):
        put = await client.put(
            "/v1/documents", json={"path": "notes.md", "content": content}, headers=tenant.headers()
        )
        assert put.status_code in (200, 201), put.text
    await admin_conn.execute(
        "UPDATE memory SET search_text = 'a moraine and a serac' WHERE tenant_id = $1 AND id = $2",
        uuid.UUID(tenant.id),
        uuid.UUID(ids[10]),
    )
    await _statistics_match_the_rows(admin_conn, tenant.id)
    await _statistics_match_the_rows(admin_conn, other.id)
    # The changed row is found by its new words only.
    assert next(i for i, _ in await _keyword(client, tenant, "moraine serac")) == ids[10]
    assert ids[10] not in {i for i, _ in await _keyword(client, tenant, "report", limit=100)}


async def test_exact_flag_gives_exact_bm25_whatever_the_settings(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    service: ServiceState,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tenant = await make_tenant()
    # 6,000 rows of the same single lexeme tie; exact BM25 breaks the tie by recency, while a cut
    # that reads 200 postings (twice the legs' fixed depth of 100) sees 200 of them by id: the
    # two results differ (except with odds of about 1 in 900).
    for start in range(0, 6000, 1000):
        await _batch(client, tenant, [f"beaver {'-' * (i % 50)} {i}" for i in range(start, start + 1000)])
    monkeypatch.setattr(service.settings, "keyword_exact_max_postings", 0)
    monkeypatch.setattr(service.settings, "keyword_postings_per_lexeme", 1)
    pruned = await _keyword(client, tenant, "beaver", limit=2)
    flagged = await _keyword(client, tenant, "beaver", limit=2, exact=True)
    monkeypatch.setattr(service.settings, "keyword_postings_per_lexeme", 0)
    exact = await _keyword(client, tenant, "beaver", limit=2)
    assert flagged == exact
    assert [i for i, _ in pruned] != [i for i, _ in exact]


async def test_rows_tied_at_the_candidate_cut_come_back_in_the_tie_order(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    # 250 rows score the same for "walrus" (same length, the word once) and each is a minute newer
    # than the last. Their postings are few enough to be read whole, so the leg must return what
    # exact BM25 does: the newest first. The cut to 150 candidates used to keep the 150 smallest
    # ids, a random half here, and the newest ten were rarely all among them.
    start = datetime.now(UTC) - timedelta(days=1)
    ids: list[str] = []
    for first in (0, 125):
        items = [
            {
                "type": "fact",
                "content": f"walrus sighting {i}",
                "created_at": (start + timedelta(minutes=i)).isoformat(),
            }
            for i in range(first, first + 125)
        ]
        response = await client.post("/v1/memories:batch", json={"items": items}, headers=tenant.headers())
        assert response.status_code == 201, response.text
        ids += [item["id"] for item in response.json()["items"]]
    newest_first = ids[::-1]
    assert [i for i, _ in await _keyword(client, tenant, "walrus", limit=10)] == newest_first[:10]
    assert [i for i, _ in await _keyword(client, tenant, "walrus", limit=10, exact=True)] == newest_first[:10]


async def test_deleting_a_tenant_removes_its_memories_postings_and_statistics(
    client: httpx.AsyncClient, make_tenant: TenantFactory, admin_conn: asyncpg.Connection
) -> None:
    tenant = await make_tenant()
    ids = await _batch(client, tenant, [f"The lighthouse log {i} mentions fog" for i in range(20)])
    await admin_conn.execute("SELECT keyword_compact($1)", uuid.UUID(tenant.id))
    await _batch(client, tenant, ["The lighthouse keeper left"])
    assert (await client.delete(f"/v1/memories/{ids[0]}", headers=tenant.headers())).status_code == 204
    await tenant_service.delete_tenant(admin_conn, tenant.id)
    tenant_id = uuid.UUID(tenant.id)
    for table in (
        "memory",
        "keyword_posting",
        "keyword_block",
        "keyword_stale",
        "keyword_lexeme_stat",
        "keyword_corpus_stat",
    ):
        assert await admin_conn.fetchval(f"SELECT count(*) FROM {table} WHERE tenant_id = $1", tenant_id) == 0
    assert await admin_conn.fetchval("SELECT count(*) FROM tenant WHERE id = $1", tenant_id) == 0
