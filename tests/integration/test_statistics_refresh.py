"""The service refreshes planner statistics itself after a bulk write, instead of waiting for autovacuum.

Right after a tenant is filled, PostgreSQL's statistics still describe the table as it was, and
every plan made meanwhile is made for that table (docs/benchmarks.md, "Keyword right after a
load"). The service's upkeep loop (app/services/maintenance.py) runs ANALYZE once a table's live
rows move past autovacuum's own tolerance. Synthetic rows stand in for embedded memories: the test
is about row counts, not semantics.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import Awaitable, Callable

import asyncpg
import numpy as np

from app.repositories import statistics as stats_repo
from tests.support import TenantFactory
from tests.synthetic_vectors import analyze, copy_facts, unit_vectors

# Well past the loop's one-second period plus PostgreSQL's one-second stats flush.
WAIT_SECONDS = 20.0


async def _eventually(holds: Callable[[], Awaitable[bool]], failure: str) -> None:
    """Wait until holds() is true; fail with `failure` after WAIT_SECONDS."""
    deadline = time.monotonic() + WAIT_SECONDS
    while not await holds():
        assert time.monotonic() < deadline, failure
        await asyncio.sleep(0.1)


async def _manual_analyzes(conn: asyncpg.Connection) -> int:
    count: int = await conn.fetchval(
        "SELECT analyze_count FROM pg_stat_user_tables WHERE relid = 'memory'::regclass"
    )
    return count


async def _planned_rows(conn: asyncpg.Connection, tenant: str) -> float:
    """The planner's estimate of the tenant's rows in memory."""
    plan = json.loads(
        await conn.fetchval(
            f"EXPLAIN (FORMAT JSON) SELECT 1 FROM memory WHERE tenant_id = '{uuid.UUID(tenant)}'::uuid"
        )
    )
    rows: float = plan[0]["Plan"]["Plan Rows"]
    return rows


async def test_a_bulk_load_is_analyzed_within_seconds_and_the_planner_sees_the_new_tenant(
    admin_conn: asyncpg.Connection, make_tenant: TenantFactory
) -> None:
    await analyze(admin_conn)
    counted: float = await admin_conn.fetchval(
        "SELECT reltuples FROM pg_class WHERE oid = 'memory'::regclass"
    )
    before = await _manual_analyzes(admin_conn)
    # Comfortably past autovacuum's default tolerance (50 rows + 10 % of the table).
    rows = math.ceil((50 + 0.1 * counted) * 1.5)
    loaded = await make_tenant("stats-load")
    await copy_facts(admin_conn, loaded.id, unit_vectors(np.random.default_rng(11), rows), [[]] * rows)

    async def analyzed() -> bool:
        return (
            await _manual_analyzes(admin_conn) > before
            and await _planned_rows(admin_conn, loaded.id) >= rows / 2
        )

    await _eventually(analyzed, f"no ANALYZE of memory within {WAIT_SECONDS} s of a {rows}-row load")
    assert await _planned_rows(admin_conn, loaded.id) >= rows / 2


async def test_updates_alone_do_not_call_for_an_analyze(
    admin_conn: asyncpg.Connection, make_tenant: TenantFactory
) -> None:
    """Every search bumps reference counts: churn that leaves the row count alone is autovacuum's."""
    tenant = await make_tenant("stats-churn")
    rows = 300
    await copy_facts(admin_conn, tenant.id, unit_vectors(np.random.default_rng(12), rows), [[]] * rows)
    # The copy's counts reach the statistics before the ANALYZE: flushed after it, they would be
    # counted twice (PostgreSQL's ANALYZE sets the live count, a late flush adds to it).
    await admin_conn.execute("SELECT pg_stat_force_next_flush()")
    await analyze(admin_conn)
    counted: float = await admin_conn.fetchval(
        "SELECT reltuples FROM pg_class WHERE oid = 'memory'::regclass"
    )
    # Enough changed rows that autovacuum itself would analyze (50 + 10 % of the table), were they inserts.
    rounds = math.ceil((50 + 0.1 * counted) * 1.5 / rows)
    updated_before: int = await admin_conn.fetchval(
        "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = 'memory'::regclass"
    )
    for _ in range(rounds):
        await admin_conn.execute(
            "UPDATE memory SET reference_count = reference_count + 1 WHERE tenant_id = $1",
            uuid.UUID(tenant.id),
        )
    await admin_conn.execute("SELECT pg_stat_force_next_flush()")

    # The updates reach the statistics views (so the check below reads them), yet call for nothing.
    async def counted_updates() -> bool:
        updated: int = await admin_conn.fetchval(
            "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = 'memory'::regclass"
        )
        return updated >= updated_before + rounds * rows

    await _eventually(counted_updates, "the updates never reached pg_stat_user_tables")
    assert "memory" not in await stats_repo.tables_with_stale_row_counts(admin_conn)


async def test_tables_of_another_role_in_the_same_schema_are_left_alone(
    admin_conn: asyncpg.Connection,
) -> None:
    """Another application's table beside recalld's is not recalld's to ANALYZE, however stale."""
    role, table = f"neighbour_{uuid.uuid4().hex[:8]}", f"neighbour_rows_{uuid.uuid4().hex[:8]}"
    await admin_conn.execute(f"CREATE ROLE {role} NOLOGIN")
    try:
        await admin_conn.execute(f"CREATE TABLE {table} (n int)")
        await admin_conn.execute(f"ALTER TABLE {table} OWNER TO {role}")
        await admin_conn.execute(f"INSERT INTO {table} SELECT generate_series(1, 500)")
        await admin_conn.execute("SELECT pg_stat_force_next_flush()")

        async def counted_inserts() -> bool:
            counted: bool = await admin_conn.fetchval(
                "SELECT n_live_tup >= 500 FROM pg_stat_user_tables WHERE relname = $1", table
            )
            return counted

        await _eventually(counted_inserts, "the inserts never reached pg_stat_user_tables")
        assert table not in await stats_repo.tables_with_stale_row_counts(admin_conn)
    finally:
        await admin_conn.execute(f"DROP TABLE IF EXISTS {table}")
        await admin_conn.execute(f"DROP ROLE {role}")
