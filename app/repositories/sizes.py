"""SQL for how big a tenant is next to the whole table (the vector leg's exact-or-HNSW choice)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg


async def embedded_row_counts(conn: asyncpg.Connection, *, tenant_ids: Sequence[str]) -> tuple[int, int]:
    """(rows with embeddings of the tenants, rows of the whole table from planner statistics)."""
    row = await conn.fetchrow(
        "SELECT (SELECT count(*) FROM memory WHERE tenant_id = ANY($1::uuid[]) AND embedding IS NOT NULL) AS mine, "
        "(SELECT reltuples::bigint FROM pg_class WHERE oid = 'memory'::regclass) AS total",
        [uuid.UUID(t) for t in tenant_ids],
    )
    assert row is not None
    mine = int(row["mine"])
    return mine, max(mine, int(row["total"]))
