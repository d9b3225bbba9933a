"""Background upkeep on the owner's login: the tenants' vector indexes and the planner's statistics.

One loop, one connection: every `statistics_interval` seconds it ANALYZEs the tables whose live
rows moved past autovacuum's tolerance (a bulk load's searches then plan for the loaded table
within about a second, not at autovacuum's next visit), and it sweeps the vector indexes at start,
every `sweep_interval` seconds, and at once when memory_vector was one of those tables (a large
write may have made a tenant big enough for its own index).
"""

from __future__ import annotations

import asyncio
import logging
import time

import asyncpg

from app.repositories import statistics as stats_repo
from app.services.vector_indexes import sweep, sweep_lock

log = logging.getLogger("recalld.maintenance")

# The table whose growth can make a tenant need its own HNSW index.
_VECTOR_TABLE = "memory_vector"


async def refresh_statistics(conn: asyncpg.Connection) -> list[str]:
    """ANALYZE each table whose row count the planner has wrong by more than autovacuum allows; those done."""
    stale = await stats_repo.tables_with_stale_row_counts(conn)
    if not stale:
        return []
    analyzed: list[str] = []
    # Under the sweep's lock: ANALYZE beside another process's CREATE INDEX CONCURRENTLY on the
    # same table would deadlock (the build waits for our snapshot, we wait for its lock).
    async with sweep_lock(conn):
        for table in stale:
            if await stats_repo.analyze_table(conn, table=table):
                analyzed.append(table)
            else:
                log.debug("ANALYZE %s gave way to a lock holder; next round", table)
    return analyzed


async def _upkeep(
    conn: asyncpg.Connection,
    *,
    min_rows: int,
    sweep_interval: float,
    statistics_interval: float,
    cache: dict[str, tuple[float, bool]],
) -> None:
    next_sweep = 0.0
    while True:
        # The sweep first: a refresh that keeps failing (and reconnecting) must not starve it.
        if time.monotonic() >= next_sweep:
            result = await sweep(conn, min_rows=min_rows, cache=cache)
            next_sweep = time.monotonic() + sweep_interval
            if result.built or result.dropped:
                log.info("vector indexes: built for %s, dropped %s", result.built, result.dropped)
        analyzed = await refresh_statistics(conn)
        if analyzed:
            log.debug("statistics refreshed: %s", ", ".join(analyzed))
        if _VECTOR_TABLE in analyzed:
            next_sweep = 0.0
        await asyncio.sleep(statistics_interval)


async def maintain(
    owner_dsn: str,
    *,
    min_rows: int,
    sweep_interval: float,
    statistics_interval: float,
    cache: dict[str, tuple[float, bool]],
) -> None:
    """Keep statistics fresh and vector indexes swept until cancelled (the service's lifespan task)."""
    while True:
        try:
            conn = await asyncpg.connect(owner_dsn)
            try:
                await _upkeep(
                    conn,
                    min_rows=min_rows,
                    sweep_interval=sweep_interval,
                    statistics_interval=statistics_interval,
                    cache=cache,
                )
            finally:
                await conn.close()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            # The database is down or restarting: searches scan exactly meanwhile; try again later.
            log.warning("background upkeep failed: %s", exc)
        await asyncio.sleep(sweep_interval)
