"""SQL for how big a tenant is next to the whole table (the vector leg's exact-or-HNSW choice)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg


async def embedded_row_counts(conn: asyncpg.Connection, *, tenant_ids: Sequence[str]) -> tuple[int, int]:
    """(rows with embeddings of the tenants, embedded rows of all tenants from planner statistics)."""
    # memory_vector holds one narrow row per embedded memory: counting a tenant's is a short
    # index-only scan of its primary key.
    row = await conn.fetchrow(
        "SELECT (SELECT count(*) FROM memory_vector WHERE tenant_id = ANY($1::uuid[])) AS mine, "
        "(SELECT reltuples::bigint FROM pg_class WHERE oid = 'memory_vector'::regclass) AS total",
        [uuid.UUID(t) for t in tenant_ids],
    )
    assert row is not None
    mine = int(row["mine"])
    return mine, max(mine, int(row["total"]))
