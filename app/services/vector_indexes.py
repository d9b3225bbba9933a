"""Each tenant's own HNSW index on memory_vector: built once the tenant is big enough, dropped with it.

A partial HNSW index per tenant (repositories.vector_indexes) makes a tenant's semantic leg cost
what its own rows cost, whatever other tenants hold; below `min_rows` embedded rows the exact scan
is as fast and needs no index. The service keeps them with the schema owner's login (the serving
role may not run DDL): a sweep (run by services.maintenance at startup, on an interval and after
large writes) drops invalid indexes (a failed concurrent build leaves one) and those of deleted
tenants, and builds the missing ones CONCURRENTLY, so no writer waits. `recalld vectors index` runs
the same sweep once.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import asyncpg

from app.repositories import vector_indexes as repo

log = logging.getLogger("recalld.vector_indexes")

# One sweep at a time across every recalld process on the database: a second one waits, then
# finds the work done.
SWEEP_LOCK_KEY = 0x7265_6361_6C6C_6476  # "recalldv"
LOCK_RETRY_SECONDS = 0.2


@dataclass(frozen=True, slots=True)
class SweepResult:
    """What one sweep did: tenants whose index it built, index names it dropped, builds that failed."""

    built: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def _tenant_of(name: str) -> str:
    return str(uuid.UUID(name.removeprefix(repo.INDEX_PREFIX)))


@asynccontextmanager
async def sweep_lock(conn: asyncpg.Connection) -> AsyncIterator[None]:
    """Hold the one-sweep-at-a-time lock, waiting for it between statements, never inside one.

    A session blocked inside pg_advisory_lock() holds a snapshot, and the holder's CREATE INDEX
    CONCURRENTLY waits for every older snapshot to go: the two would deadlock. So the lock is
    tried, and the wait is a sleep with no statement open.
    """
    locked = False
    while not locked:
        locked = await conn.fetchval("SELECT pg_try_advisory_lock($1)", SWEEP_LOCK_KEY)
        if not locked:
            await asyncio.sleep(LOCK_RETRY_SECONDS)
    try:
        yield
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", SWEEP_LOCK_KEY)


async def sweep(
    conn: asyncpg.Connection, *, min_rows: int, cache: dict[str, tuple[float, bool]] | None = None
) -> SweepResult:
    """Drop stale indexes and build missing ones over conn (the owner's, outside a transaction).

    `cache` (the searches' per-tenant index cache of this process) learns each change at once.
    """
    result = SweepResult()
    async with sweep_lock(conn):
        for name in await repo.stale_indexes(conn):
            await repo.drop_index(conn, name=name)
            result.dropped.append(name)
            if cache is not None:
                cache.pop(_tenant_of(name), None)
        async with conn.transaction(readonly=True):
            await repo.see_every_tenant(conn)
            needing = await repo.tenants_needing_index(conn, min_rows=min_rows)
        for tenant in needing:
            try:
                await repo.build_index(conn, tenant_id=tenant)
            except asyncpg.PostgresError as exc:
                # CONCURRENTLY leaves the failed index behind, invalid: drop it, the next sweep retries.
                log.warning("building the vector index of tenant %s failed: %s", tenant, exc)
                await repo.drop_index(conn, name=repo.index_name(tenant))
                result.failed.append(tenant)
                continue
            result.built.append(tenant)
            if cache is not None:
                cache[tenant] = (time.monotonic(), True)
    return result


async def drop_tenant_index(conn: asyncpg.Connection, *, tenant_id: str) -> None:
    """Drop a deleted tenant's index (the owner's connection, outside a transaction)."""
    # Under the sweep's lock: a concurrent build on the table would deadlock with the drop.
    async with sweep_lock(conn):
        await repo.drop_index(conn, name=repo.index_name(tenant_id))
