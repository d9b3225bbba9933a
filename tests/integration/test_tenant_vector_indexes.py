"""Each big enough tenant gets its own HNSW index (partial, on memory_vector), and searches use it.

The sweep (app/services/vector_indexes.py) builds an index per tenant past the row threshold, drops
invalid ones (what a failed CONCURRENTLY build leaves) and retries, and drops a deleted tenant's.
The semantic leg walks a tenant's own graph, so its answer cannot depend on other tenants' rows,
and row-level security still bounds what any index returns.
Synthetic unit vectors stand in for embeddings where the test is about ranking, not semantics.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path

import asyncpg
import numpy as np
import pytest
from httpx import AsyncClient

from app.infra.db import tenant_transaction
from app.repositories import tenants as tenant_repo
from app.repositories import vector_indexes as index_repo
from app.repositories.search import CandidateFilter
from app.retrieval.hits import Hit
from app.services import tenants as tenant_service
from app.services.ranking import run_vector_leg
from app.services.vector_indexes import sweep
from app.state import ServiceState
from tests.support import TenantFactory
from tests.synthetic_vectors import analyze, copy_facts, nearest, unit_vectors

ROOT = Path(__file__).resolve().parents[2]
MIN_ROWS = 400
LIMIT = 10
RARE_TAG_EVERY = 10


async def _as_the_service(conn: asyncpg.Connection) -> None:
    """The session settings the service's pool sets on each connection (app.infra.db.create_pool)."""
    await conn.execute("SET hnsw.iterative_scan = strict_order; SET hnsw.ef_search = 100")


async def _fill(conn: asyncpg.Connection, tenant: str, vectors: np.ndarray) -> list[uuid.UUID]:
    """Rows of `tenant` with the given vectors (every RARE_TAG_EVERY-th tagged "rare"); their ids."""
    return await copy_facts(
        conn, tenant, vectors, [["rare"] if i % RARE_TAG_EVERY == 0 else [] for i in range(len(vectors))]
    )


def _exact(vectors: np.ndarray, ids: list[uuid.UUID], query: np.ndarray, keep: list[bool]) -> list[uuid.UUID]:
    return nearest(vectors, ids, query, keep, LIMIT)


async def _leg(
    conn: asyncpg.Connection,
    f: CandidateFilter,
    query: np.ndarray,
    *,
    indexed: set[str] | None = None,
    exact: bool = False,
) -> list[Hit]:
    """The semantic leg at LIMIT, walking the tenants of `indexed` through their own indexes."""
    return await run_vector_leg(
        conn, f, query, LIMIT, exact=exact, min_similarity=None, indexed=indexed or ()
    )


async def _walked(conn: asyncpg.Connection, tenant: str) -> int:
    """Tuples the tenant's index handed out so far (PostgreSQL's count, not yet flushed ones included)."""
    count: int = await conn.fetchval(
        "SELECT pg_stat_get_xact_tuples_returned($1::regclass)", index_repo.index_name(tenant)
    )
    return count


async def _index_valid(conn: asyncpg.Connection, tenant: str) -> bool | None:
    """True/False: the tenant's index exists and is (not) valid; None: there is none."""
    valid: bool | None = await conn.fetchval(
        "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = $1",
        index_repo.index_name(tenant),
    )
    return valid


async def test_a_tenant_past_the_threshold_gets_its_own_index_and_its_searches_use_it(
    client: AsyncClient,
    admin_conn: asyncpg.Connection,
    make_tenant: TenantFactory,
    service: ServiceState,
) -> None:
    big, small = await make_tenant("idx-big"), await make_tenant("idx-small")
    rng = np.random.default_rng(5)
    await _fill(admin_conn, big.id, unit_vectors(rng, MIN_ROWS))
    await _fill(admin_conn, small.id, unit_vectors(rng, MIN_ROWS // 2))
    await analyze(admin_conn)
    result = await sweep(admin_conn, min_rows=MIN_ROWS, cache=service.vector_indexes)
    assert big.id in result.built and small.id not in result.built
    assert await _index_valid(admin_conn, big.id) is True
    assert await _index_valid(admin_conn, small.id) is None
    # A second sweep has nothing left to do for these tenants.
    assert big.id not in (await sweep(admin_conn, min_rows=MIN_ROWS)).built

    async def scans() -> int:
        count: int = await admin_conn.fetchval(
            "SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes WHERE indexrelname = $1",
            index_repo.index_name(big.id),
        )
        return count

    before = await scans()
    found = await client.post(
        "/v1/search", json={"query": "row", "mode": "semantic", "limit": 5}, headers=big.headers("reader")
    )
    assert found.status_code == 200, found.text
    assert len(found.json()["results"]) == 5
    # The statistics reach the view within a second of the search's transaction.
    for _ in range(150):
        if await scans() > before:
            break
        await asyncio.sleep(0.1)
    assert await scans() > before


async def test_results_through_the_tenants_own_index_are_its_nearest_rows_whoever_else_is_in_the_table(
    admin_conn: asyncpg.Connection, serving_conn: asyncpg.Connection
) -> None:
    await _as_the_service(serving_conn)
    rng = np.random.default_rng(9)
    vectors = unit_vectors(rng, MIN_ROWS)
    # The same rows in a tenant beside a 6x bigger neighbour and in one with no neighbour of size.
    crowded = (await tenant_repo.create_tenant(admin_conn, name=f"idx-crowded-{uuid.uuid4().hex[:8]}")).id
    neighbour = (await tenant_repo.create_tenant(admin_conn, name=f"idx-nb-{uuid.uuid4().hex[:8]}")).id
    crowded_ids = await _fill(admin_conn, crowded, vectors)
    await _fill(admin_conn, neighbour, unit_vectors(rng, 6 * MIN_ROWS))
    await analyze(admin_conn)
    await sweep(admin_conn, min_rows=MIN_ROWS)
    assert await _index_valid(admin_conn, crowded) is True
    rare = [i % RARE_TAG_EVERY == 0 for i in range(MIN_ROWS)]
    hits = total = 0
    for query in unit_vectors(np.random.default_rng(13), 5):
        for tags, keep in ((None, [True] * MIN_ROWS), (["rare"], rare)):
            f = CandidateFilter(tenant_ids=[crowded], kinds=["fact"], tags=tags)
            async with tenant_transaction(serving_conn, [crowded]):
                through_index = await _leg(serving_conn, f, query, indexed={crowded})
                exact = await _leg(serving_conn, f, query, exact=True)
            assert [r.id for r in exact] == _exact(vectors, crowded_ids, query, keep)
            # Filters apply while the walk goes on (iterative scan): the leg still fills its limit.
            assert len(through_index) == LIMIT
            assert {r.id for r in through_index} <= set(crowded_ids)
            assert [r.score for r in through_index] == sorted((r.score for r in through_index), reverse=True)
            hits += len({r.id for r in through_index} & {r.id for r in exact})
            total += LIMIT
    assert hits / total >= 0.95


async def test_no_tenant_reads_another_through_any_index(
    admin_conn: asyncpg.Connection, serving_conn: asyncpg.Connection
) -> None:
    await _as_the_service(serving_conn)
    rng = np.random.default_rng(17)
    a = (await tenant_repo.create_tenant(admin_conn, name=f"idx-a-{uuid.uuid4().hex[:8]}")).id
    b = (await tenant_repo.create_tenant(admin_conn, name=f"idx-b-{uuid.uuid4().hex[:8]}")).id
    a_vectors, b_vectors = unit_vectors(rng, MIN_ROWS), unit_vectors(rng, MIN_ROWS)
    a_ids = await _fill(admin_conn, a, a_vectors)
    b_ids = await _fill(admin_conn, b, b_vectors)
    await sweep(admin_conn, min_rows=MIN_ROWS)
    query = b_vectors[0]
    async with tenant_transaction(serving_conn, [a]):
        # Bound to tenant a, asking for b's rows through b's own index finds nothing (RLS).
        leaked = await _leg(serving_conn, CandidateFilter(tenant_ids=[b], kinds=["fact"]), query, indexed={b})
        assert leaked == []
        mine = await _leg(serving_conn, CandidateFilter(tenant_ids=[a], kinds=["fact"]), query, indexed={a})
        assert {r.id for r in mine} <= set(a_ids)
    # Both tenants at once: each through its own index, merged as one exact ranking would order them.
    both = CandidateFilter(tenant_ids=[a, b], kinds=["fact"])
    async with tenant_transaction(serving_conn, [a, b]):
        merged = await _leg(serving_conn, both, query, indexed={a, b})
        exact = await _leg(serving_conn, both, query, exact=True)
    assert merged[0].id == b_ids[0]
    assert [r.score for r in merged] == sorted((r.score for r in merged), reverse=True)
    assert len({r.id for r in merged} & {r.id for r in exact}) >= LIMIT - 1


async def test_a_failed_build_is_dropped_and_retried_and_a_deleted_tenant_loses_its_index(
    admin_conn: asyncpg.Connection, service: ServiceState
) -> None:
    tenant = (await tenant_repo.create_tenant(admin_conn, name=f"idx-retry-{uuid.uuid4().hex[:8]}")).id
    await _fill(admin_conn, tenant, unit_vectors(np.random.default_rng(21), MIN_ROWS))
    await sweep(admin_conn, min_rows=MIN_ROWS, cache=service.vector_indexes)
    assert await _index_valid(admin_conn, tenant) is True
    # What an interrupted CREATE INDEX CONCURRENTLY leaves behind: the index, marked invalid.
    await admin_conn.execute(
        "UPDATE pg_index SET indisvalid = false WHERE indexrelid = $1::regclass",
        index_repo.index_name(tenant),
    )
    assert await index_repo.valid_indexes(admin_conn, tenant_ids=[tenant]) == set()
    result = await sweep(admin_conn, min_rows=MIN_ROWS, cache=service.vector_indexes)
    assert index_repo.index_name(tenant) in result.dropped
    assert tenant in result.built
    assert await _index_valid(admin_conn, tenant) is True
    assert service.vector_indexes[tenant][1] is True

    await tenant_service.delete_tenant(admin_conn, tenant)
    assert await _index_valid(admin_conn, tenant) is None


@pytest.mark.parametrize("exact", [True, False])
async def test_a_tenant_without_an_index_is_scanned_exactly(
    exact: bool, admin_conn: asyncpg.Connection, serving_conn: asyncpg.Connection
) -> None:
    await _as_the_service(serving_conn)
    tenant = (await tenant_repo.create_tenant(admin_conn, name=f"idx-none-{uuid.uuid4().hex[:8]}")).id
    vectors = unit_vectors(np.random.default_rng(23), 50)
    ids = await _fill(admin_conn, tenant, vectors)
    query = unit_vectors(np.random.default_rng(29), 1)[0]
    async with tenant_transaction(serving_conn, [tenant]):
        # Told it has one, without one: the statement still sorts the tenant's own rows.
        rows = await _leg(
            serving_conn,
            CandidateFilter(tenant_ids=[tenant], kinds=["fact"]),
            query,
            indexed={tenant},
            exact=exact,
        )
    assert [r.id for r in rows] == _exact(vectors, ids, query, [True] * len(ids))


async def test_the_sweep_finds_big_tenants_when_row_level_security_binds_the_sweeping_role(
    admin_conn: asyncpg.Connection, make_tenant: TenantFactory
) -> None:
    """An external database's owner is seldom a superuser: the tenant tables' forced RLS binds it."""
    big = await make_tenant("idx-rls")
    await _fill(admin_conn, big.id, unit_vectors(np.random.default_rng(11), MIN_ROWS))
    role = f"sweeper_{uuid.uuid4().hex[:8]}"
    # Stands in for a non-superuser owner: lists every tenant (as the owner's policy lets it) and
    # reads the tenant tables, with no exemption from their row-level security.
    await admin_conn.execute(f"CREATE ROLE {role}")
    await admin_conn.execute(f"GRANT SELECT ON tenant, tenant_usage, memory_vector TO {role}")
    await admin_conn.execute(f"CREATE POLICY {role}_lists_tenants ON tenant TO {role} USING (true)")
    try:
        await admin_conn.execute(f"SET ROLE {role}")
        async with admin_conn.transaction(readonly=True):
            await index_repo.see_every_tenant(admin_conn)
            needing = await index_repo.tenants_needing_index(admin_conn, min_rows=MIN_ROWS)
        assert big.id in needing
    finally:
        await admin_conn.execute("RESET ROLE")
        await admin_conn.execute(f"DROP POLICY {role}_lists_tenants ON tenant")
        await admin_conn.execute(f"REVOKE ALL ON tenant, tenant_usage, memory_vector FROM {role}")
        await admin_conn.execute(f"DROP ROLE {role}")


async def test_vectors_index_every_keeps_sweeping_until_stopped(
    admin_conn: asyncpg.Connection, make_tenant: TenantFactory, data_dir: Path
) -> None:
    """`recalld vectors index --every N` beside a serve without the owner's login: later growth is indexed."""
    tenant = await make_tenant("idx-every")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "app.cli",
        "vectors",
        "index",
        "--every",
        "0.5",
        cwd=ROOT,
        env={
            "RECALLD_DATA_DIR": str(data_dir),
            "RECALLD_EXACT_SCAN_MAX_ROWS": str(MIN_ROWS),
            "HF_HUB_OFFLINE": "1",
            "PATH": os.environ.get("PATH", ""),
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        # The tenant passes the threshold only after the command has started.
        await _fill(admin_conn, tenant.id, unit_vectors(np.random.default_rng(13), MIN_ROWS))
        for _ in range(600):
            if await _index_valid(admin_conn, tenant.id) or process.returncode is not None:
                break
            await asyncio.sleep(0.1)
        assert process.returncode is None, "the command stopped instead of sweeping again"
        assert await _index_valid(admin_conn, tenant.id) is True
        # The index is valid a moment before the sweep reports it: read until the report.
        assert process.stdout is not None
        reported = b""
        while tenant.id.encode() not in reported:
            line = await asyncio.wait_for(process.stdout.readline(), timeout=30)
            assert line, "the command ended without reporting the build"
            reported += line
    finally:
        if process.returncode is None:
            process.terminate()
        await process.communicate()


async def test_vectors_index_every_refuses_a_period_that_is_not_positive(data_dir: Path) -> None:
    for every in ("0", "-1", "soon"):
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "app.cli",
            "vectors",
            "index",
            "--every",
            every,
            cwd=ROOT,
            env={"RECALLD_DATA_DIR": str(data_dir), "PATH": os.environ.get("PATH", "")},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await process.communicate()
        assert process.returncode == 2, every
        assert "expected a positive number of seconds" in output.decode()


async def test_two_sweeps_at_once_build_every_index_without_a_deadlock(
    admin_conn: asyncpg.Connection, dsn: str, make_tenant: TenantFactory
) -> None:
    """Two processes sweeping together (two serves, or a serve and `vectors index`): both finish, no build fails."""
    tenants = [await make_tenant("idx-two") for _ in range(3)]
    rng = np.random.default_rng(17)
    for tenant in tenants:
        await _fill(admin_conn, tenant.id, unit_vectors(rng, MIN_ROWS))
    other = await asyncpg.connect(dsn)
    try:
        first, second = await asyncio.gather(
            sweep(admin_conn, min_rows=MIN_ROWS), sweep(other, min_rows=MIN_ROWS)
        )
    finally:
        await other.close()
    assert first.failed == second.failed == []
    assert {t.id for t in tenants} <= set(first.built) | set(second.built)
    assert all([await _index_valid(admin_conn, t.id) for t in tenants])


async def _indexed_tenant(
    admin_conn: asyncpg.Connection, serving_conn: asyncpg.Connection, name: str, seed: int
) -> tuple[str, list[uuid.UUID], np.ndarray]:
    """A tenant of MIN_ROWS rows with its own index built; serving_conn set up as the service's."""
    await _as_the_service(serving_conn)
    tenant = (await tenant_repo.create_tenant(admin_conn, name=f"{name}-{uuid.uuid4().hex[:8]}")).id
    vectors = unit_vectors(np.random.default_rng(seed), MIN_ROWS)
    ids = await _fill(admin_conn, tenant, vectors)
    await analyze(admin_conn)
    await sweep(admin_conn, min_rows=MIN_ROWS)
    return tenant, ids, vectors


async def _walk(
    serving_conn: asyncpg.Connection, tenant: str, query: np.ndarray, tags: list[str] | None = None
) -> tuple[list[Hit], int]:
    """The tenant's semantic leg through its own index, and the index tuples the leg took."""
    async with tenant_transaction(serving_conn, [tenant]):
        # The count runs on until the backend flushes its statistics: the leg's share is the difference.
        before = await _walked(serving_conn, tenant)
        rows = await _leg(
            serving_conn,
            CandidateFilter(tenant_ids=[tenant], kinds=["fact"], tags=tags),
            query,
            indexed={tenant},
        )
        return rows, await _walked(serving_conn, tenant) - before


async def test_the_walk_stops_at_the_last_row_the_leg_returns(
    admin_conn: asyncpg.Connection, serving_conn: asyncpg.Connection
) -> None:
    # Each row the tenant's index yields past the last one the leg needs is waste, and the first
    # row past ef_search starts a second HNSW search (a third of the leg's time at 50,000 rows).
    tenant, ids, vectors = await _indexed_tenant(admin_conn, serving_conn, "idx-walk", 31)
    rare = [i % RARE_TAG_EVERY == 0 for i in range(MIN_ROWS)]
    query = unit_vectors(np.random.default_rng(37), 1)[0]
    for tags, keep in ((None, [True] * MIN_ROWS), (["rare"], rare)):
        rows, walked = await _walk(serving_conn, tenant, query, tags)
        if tags is None:
            assert [r.id for r in rows] == _exact(vectors, ids, query, keep)
            assert walked == LIMIT
        else:
            # Filtered, the walk goes on until LIMIT rows pass.
            assert len(rows) == LIMIT and all(keep[ids.index(r.id)] for r in rows)
            assert walked > LIMIT


async def test_a_tenants_walk_is_planned_once_per_connection_and_still_walks_its_own_index(
    admin_conn: asyncpg.Connection, serving_conn: asyncpg.Connection
) -> None:
    # Planning the walk for each search cost a tenth of the statement at 50,000 rows (docs): the
    # plan made by the first search of a connection serves the next ones, through the index.
    tenant, ids, vectors = await _indexed_tenant(admin_conn, serving_conn, "idx-plan", 41)
    queries = unit_vectors(np.random.default_rng(43), 3)
    for query in queries:
        rows, walked = await _walk(serving_conn, tenant, query)
        assert [r.id for r in rows] == _exact(vectors, ids, query, [True] * MIN_ROWS)
        assert walked == LIMIT
    plans = await serving_conn.fetch(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE '%FROM memory_vector v%'"
        " AND statement LIKE $1",
        f"%{tenant}%",
    )
    assert [(p["generic_plans"], p["custom_plans"]) for p in plans] == [(len(queries), 0)]


async def test_a_small_tenants_exact_scan_is_planned_once_per_connection_and_stays_exact(
    admin_conn: asyncpg.Connection, serving_conn: asyncpg.Connection, make_tenant: TenantFactory
) -> None:
    # Below the index threshold every search scans the tenant's vectors exactly; planning that scan
    # per search cost about as much as running it (docs). The first search's plan serves the rest.
    await _as_the_service(serving_conn)
    tenant = (await make_tenant("exact-plan")).id
    vectors = unit_vectors(np.random.default_rng(47), 60)
    ids = await _fill(admin_conn, tenant, vectors)
    queries = unit_vectors(np.random.default_rng(48), 3)
    for query in queries:
        async with tenant_transaction(serving_conn, [tenant]):
            rows = await _leg(serving_conn, CandidateFilter(tenant_ids=[tenant], kinds=["fact"]), query)
        assert [r.id for r in rows] == _exact(vectors, ids, query, [True] * len(ids))
    plans = await serving_conn.fetch(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE '%WITH nearest AS%'"
        " AND statement NOT LIKE '%pg_prepared_statements%'"
    )
    assert [(p["generic_plans"], p["custom_plans"]) for p in plans] == [(len(queries), 0)]
