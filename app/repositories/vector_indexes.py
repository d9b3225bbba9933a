"""SQL of the per-tenant HNSW indexes on memory_vector: which exist, which tenants need one, build, drop.

Each index is partial (`WHERE tenant_id = '<tenant>'`), so a tenant's HNSW walk visits only its own
rows, whatever its neighbours hold. Building and dropping is DDL: only the schema owner may (the
serving role only reads the catalog). Index names are derived from the tenant id, never user text.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg

from app.repositories.embedding_storage import cosine_opclass, stored_column_type

INDEX_PREFIX = "memory_vector_hnsw_"
# The graph parameters of the HNSW index memory.embedding had (migration 0002).
HNSW_WITH = "WITH (m = 16, ef_construction = 64)"


def index_name(tenant_id: str) -> str:
    """memory_vector_hnsw_<tenant id as 32 hex digits> (63 characters at most, as PostgreSQL needs)."""
    return f"{INDEX_PREFIX}{uuid.UUID(tenant_id).hex}"


async def valid_indexes(conn: asyncpg.Connection, *, tenant_ids: Sequence[str]) -> set[str]:
    """The tenants among tenant_ids whose index exists and is valid (a catalog lookup by name)."""
    names = {index_name(t): t for t in tenant_ids}
    rows = await conn.fetch(
        "SELECT c.relname FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
        "WHERE c.relname = ANY($1::text[]) AND i.indrelid = 'memory_vector'::regclass AND i.indisvalid",
        list(names),
    )
    return {names[r["relname"]] for r in rows}


async def see_every_tenant(conn: asyncpg.Connection) -> None:
    """Bind this transaction's row-level security to every tenant the connecting role can list.

    The tenant tables force row-level security, which binds their owner too unless it is a
    superuser (an external database's owner usually is not): without this, the sweep would see no
    tenant's rows and never build an index.
    """
    await conn.execute(
        "SELECT set_config('recalld.tenant_ids', coalesce(string_agg(id::text, ','), ''), true) FROM tenant"
    )


async def tenants_needing_index(conn: asyncpg.Connection, *, min_rows: int) -> list[str]:
    """Tenants with at least min_rows embedded rows and no valid index (after see_every_tenant).

    tenant_usage's memory count (kept by triggers) bounds the embedded rows from above, so only
    tenants with that many memories are counted, and each count stops at min_rows (a bounded
    index-only read of memory_vector's key); tenants with a valid index are not counted at all.
    """
    rows = await conn.fetch(
        f"""
        SELECT t.id FROM tenant t JOIN tenant_usage u ON u.tenant_id = t.id AND u.memories >= $1
        WHERE NOT EXISTS (
            SELECT 1 FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
            WHERE c.relname = '{INDEX_PREFIX}' || replace(t.id::text, '-', '') AND i.indisvalid
        ) AND (SELECT count(*) FROM (
            SELECT 1 FROM memory_vector v WHERE v.tenant_id = t.id LIMIT $1
        ) s) >= $1
        ORDER BY t.id
        """,
        min_rows,
    )
    return [str(r["id"]) for r in rows]


async def stale_indexes(conn: asyncpg.Connection) -> list[str]:
    """Index names to drop: invalid ones (a failed concurrent build) and those of deleted tenants."""
    rows = await conn.fetch(
        f"""
        SELECT c.relname FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
        WHERE i.indrelid = 'memory_vector'::regclass AND c.relname LIKE '{INDEX_PREFIX}%'
          AND (NOT i.indisvalid OR NOT EXISTS (
              SELECT 1 FROM tenant t WHERE '{INDEX_PREFIX}' || replace(t.id::text, '-', '') = c.relname
          ))
        ORDER BY c.relname
        """
    )
    return [str(r["relname"]) for r in rows]


async def build_index(conn: asyncpg.Connection, *, tenant_id: str, concurrently: bool = True) -> None:
    """CREATE INDEX [CONCURRENTLY] of one tenant (outside a transaction when concurrently)."""
    # DDL takes no parameters: format() quotes the name (%I) and the tenant id (%L) in PostgreSQL.
    how = "CONCURRENTLY " if concurrently else ""
    # vector or halfvec, as the deployment's model dimension made the column (embedding_storage).
    opclass = cosine_opclass(await stored_column_type(conn))
    statement: str = await conn.fetchval(
        f"SELECT format('CREATE INDEX {how}IF NOT EXISTS %I ON memory_vector "
        f"USING hnsw (embedding {opclass}) {HNSW_WITH} WHERE tenant_id = %L::uuid', $1::text, $2::text)",
        index_name(tenant_id),
        str(uuid.UUID(tenant_id)),
    )
    await conn.execute(statement)


async def drop_index(conn: asyncpg.Connection, *, name: str, concurrently: bool = True) -> None:
    """DROP INDEX [CONCURRENTLY] IF EXISTS of one of these indexes (by the name stale_indexes gave)."""
    if not name.startswith(INDEX_PREFIX):
        raise ValueError(f"not a tenant vector index: {name!r}")
    how = "CONCURRENTLY " if concurrently else ""
    statement: str = await conn.fetchval(f"SELECT format('DROP INDEX {how}IF EXISTS %I', $1::text)", name)
    await conn.execute(statement)
