"""The exact vector leg reads the tenant's own narrow vectors (memory_vector), not the shared table.

A small tenant among big ones must get its full `limit` of true nearest neighbours (the cosine of
the stored vectors, brute-forced here with numpy), filters included; the narrow copy must follow
every write (insert, re-embedding, forget) and stay behind row-level security.
Synthetic unit vectors stand in for embeddings where the test is about ranking, not semantics.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import numpy as np
import pytest
from httpx import AsyncClient

from app.infra.db import tenant_transaction
from app.repositories import search as search_repo
from app.repositories.search import CandidateFilter
from app.retrieval.query import parse_query
from app.services.ranking import LegPlan, rank_candidates, run_vector_leg
from app.services.timings import Timings
from app.state import ServiceState
from tests.support import TenantFactory
from tests.synthetic_vectors import analyze, copy_facts, nearest, unit_vectors

# A small tenant between two bigger ones, in one table.
SIZES = {"small": 300, "mid": 2_000, "big": 5_000}
RARE_TAG_EVERY = 20  # 5 % of the rows are tagged "rare"
LIMIT = 10


@pytest.fixture(scope="module")
async def crowded(dsn: str) -> dict[str, tuple[str, list[uuid.UUID], np.ndarray, list[bool]]]:
    """Tenants of mixed sizes in one table: name -> (tenant id, memory ids, vectors, tagged "rare")."""
    from app.infra.db import connect
    from app.repositories import tenants as tenant_repo

    conn = await connect(dsn)
    try:
        rng = np.random.default_rng(7)
        out = {}
        for name, rows in SIZES.items():
            tenant = (await tenant_repo.create_tenant(conn, name=f"vec-{name}-{uuid.uuid4().hex[:8]}")).id
            vectors = unit_vectors(rng, rows)
            tags = [["rare"] if i % RARE_TAG_EVERY == 0 else [] for i in range(rows)]
            ids = await copy_facts(conn, tenant, vectors, tags)
            out[name] = (tenant, ids, vectors, ["rare" in t for t in tags])
        await analyze(conn)
        return out
    finally:
        await conn.close()


async def test_small_tenant_among_big_ones_gets_its_true_nearest_neighbours(
    crowded: dict[str, tuple[str, list[uuid.UUID], np.ndarray, list[bool]]], serving_conn: asyncpg.Connection
) -> None:
    tenant, ids, vectors, rare = crowded["small"]
    query = unit_vectors(np.random.default_rng(11), 1)[0]
    for tags, keep in ((None, [True] * len(ids)), (["rare"], rare)):
        async with tenant_transaction(serving_conn, [tenant]):
            rows = await run_vector_leg(
                serving_conn,
                CandidateFilter(tenant_ids=[tenant], kinds=["fact"], tags=tags),
                query,
                LIMIT,
                exact=True,
                min_similarity=None,
            )
        # The tag keeps 1 row in 20: the nearest candidates hold too few, the leg reads on.
        assert [r.id for r in rows] == nearest(vectors, ids, query, keep, LIMIT), tags
        assert [r.score for r in rows] == sorted((r.score for r in rows), reverse=True)
        expected = vectors[[ids.index(r.id) for r in rows]].astype(np.float64) @ query.astype(np.float64)
        assert np.allclose([r.score for r in rows], expected, atol=1e-5)


async def test_the_narrow_vectors_are_each_tenants_own(
    crowded: dict[str, tuple[str, list[uuid.UUID], np.ndarray, list[bool]]], serving_conn: asyncpg.Connection
) -> None:
    small, big = crowded["small"][0], crowded["big"][0]
    async with tenant_transaction(serving_conn, [small]):
        seen = await serving_conn.fetch("SELECT DISTINCT tenant_id FROM memory_vector")
        assert [str(r["tenant_id"]) for r in seen] == [small]
        # Asking for another tenant's rows while bound to this one finds nothing.
        leaked = await search_repo.search_by_exact_vector(
            serving_conn,
            f=CandidateFilter(tenant_ids=[big], kinds=["fact"]),
            query_vector=crowded["big"][2][0],
            limit=LIMIT,
            candidates=None,
        )
        assert leaked.rows == []
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        async with tenant_transaction(serving_conn, [small]):
            await serving_conn.execute(
                "INSERT INTO memory_vector (tenant_id, memory_id, embedding) VALUES ($1, $2, $3)",
                uuid.UUID(big),
                crowded["big"][1][0],
                crowded["big"][2][0],
            )


async def test_rows_tied_at_the_candidate_cut_keep_the_full_scans_order(
    dsn: str, serving_conn: asyncpg.Connection, make_tenant: TenantFactory
) -> None:
    from app.infra.db import connect

    tenant = await make_tenant("vec-ties")
    rng = np.random.default_rng(3)
    query = unit_vectors(rng, 1)[0]
    # 40 copies of one vector (the same text stored again) and 200 others farther away.
    twin = query + 0.5 * unit_vectors(rng, 1)[0]
    vectors = np.vstack([np.tile(twin / np.linalg.norm(twin), (40, 1)), unit_vectors(rng, 200)]).astype(
        np.float32
    )
    now = datetime.now(UTC)
    conn = await connect(dsn)
    try:
        await conn.copy_records_to_table(
            "memory",
            records=[
                (
                    uuid.UUID(tenant.id),
                    uuid.uuid4(),
                    "fact",
                    f"t {i}",
                    f"t {i}",
                    vectors[i],
                    1.0,
                    0.0,
                    now,
                    "active",
                    now - timedelta(minutes=i % 7),
                )
                for i in range(len(vectors))
            ],
            columns=[
                "tenant_id",
                "id",
                "kind",
                "content",
                "search_text",
                "embedding",
                "confidence",
                "decay_rate",
                "last_confirmed_at",
                "validity",
                "created_at",
            ],
        )
    finally:
        await conn.close()
    f = CandidateFilter(tenant_ids=[tenant.id], kinds=["fact"])
    async with tenant_transaction(serving_conn, [tenant.id]):
        full = await search_repo.search_by_exact_vector(
            serving_conn, f=f, query_vector=query, limit=LIMIT, candidates=None
        )
        cut = await search_repo.search_by_exact_vector(
            serving_conn, f=f, query_vector=query, limit=LIMIT, candidates=2 * LIMIT
        )
        served = await run_vector_leg(serving_conn, f, query, LIMIT, exact=True, min_similarity=None)
    # The first 20 by distance alone are some of the 40 twins, not necessarily the newest ones.
    assert cut.truncated
    assert served == full.rows
    assert [r.created_at for r in served] == sorted((r.created_at for r in served), reverse=True)


async def test_the_vector_leg_follows_writes_and_forgets(
    client: AsyncClient, admin_conn: asyncpg.Connection, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant("vec-writes")
    headers = {"Authorization": f"Bearer {tenant.writer}"}
    stored = await client.post(
        "/v1/memories:batch",
        headers=headers,
        json={
            "items": [
                {"type": "fact", "content": "The heron nests by the north pond every spring"},
                {"type": "fact", "content": "Quarterly invoices go to the finance mailbox"},
                {
                    "type": "episode",
                    "content": "We talked about the heron again",
                    "butler": "b",
                    "session_id": "s1",
                },
            ]
        },
    )
    assert stored.status_code in (200, 201), stored.text
    tenant_id = uuid.UUID(tenant.id)

    async def copies() -> int:
        # Every embedded memory has its narrow copy, with the same vector, and nothing else.
        return int(
            await admin_conn.fetchval(
                "SELECT count(*) FROM memory m FULL JOIN memory_vector v ON v.tenant_id = m.tenant_id "
                "AND v.memory_id = m.id WHERE coalesce(m.tenant_id, v.tenant_id) = $1 "
                "AND (m.embedding IS DISTINCT FROM v.embedding)",
                tenant_id,
            )
        )

    assert await copies() == 0
    assert (
        await admin_conn.fetchval("SELECT count(*) FROM memory_vector WHERE tenant_id = $1", tenant_id) == 3
    )

    body = {"query": "where do herons nest", "mode": "semantic", "limit": 5, "exact": True, "min_score": 0}
    found = (await client.post("/v1/search", headers=headers, json=body)).json()["results"]
    heron = next(r["id"] for r in found if "north pond" in r["content"])

    # A turn written before the episode re-embeds it with that turn (conversation context).
    earlier = await client.post(
        "/v1/episodes",
        headers=headers,
        json={
            "content": "Did you see the heron?",
            "butler": "b",
            "session_id": "s1",
            "created_at": "2020-01-01T00:00:00Z",
        },
    )
    assert earlier.status_code == 201, earlier.text
    assert await copies() == 0

    forgotten = await client.delete(f"/v1/memories/{heron}", headers=headers)
    assert forgotten.status_code == 204
    assert await copies() == 0
    after = (await client.post("/v1/search", headers=headers, json=body)).json()["results"]
    assert heron not in {r["id"] for r in after}
    assert after, "the other memories are still found"


@pytest.mark.parametrize("embedded", [True, False])
async def test_the_walks_settings_end_with_the_semantic_leg_even_when_the_embedding_fails(
    embedded: bool,
    crowded: dict[str, tuple[str, list[uuid.UUID], np.ndarray, list[bool]]],
    serving_conn: asyncpg.Connection,
    service: ServiceState,
) -> None:
    # The settings go on while the query is still being embedded; whatever comes of the
    # embedding, the statements after the leg (the reference bump, context) plan as usual.
    tenant, _, vectors, _ = crowded["small"]
    service.vector_indexes[tenant] = (time.monotonic(), True)  # told it has an index, so it walks

    async def embedding() -> np.ndarray | None:
        return vectors[0] if embedded else None

    plan = LegPlan(
        semantic=True, keyword=False, fusion="rrf", weights={"semantic": 1.0, "keyword": 1.0}, k=60
    )
    async with tenant_transaction(serving_conn, [tenant]):
        ranked, _, _ = await rank_candidates(
            service,
            serving_conn,
            f=CandidateFilter(tenant_ids=[tenant], kinds=["fact"]),
            parsed=parse_query("row"),
            vector=asyncio.create_task(embedding()),
            plan=plan,
            depth=LIMIT,
            min_similarity=None,
            timings=Timings(),
        )
        settings = await serving_conn.fetchrow(
            "SELECT current_setting('enable_sort') AS sort, current_setting('plan_cache_mode') AS plans"
        )
    assert len(ranked) == (LIMIT if embedded else 0)
    assert (settings["sort"], settings["plans"]) == ("on", "auto")
