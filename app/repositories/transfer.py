"""SQL for export and import: a tenant's rows as JSON objects, table by table, whatever columns they have.

Rows are read and written through to_jsonb / jsonb_populate_recordset, so every column a migration
adds travels without a change here. Table names come from the fixed list in services.transfer, and
column names from the catalogue; both are quoted as identifiers.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg


@dataclass(frozen=True, slots=True)
class Column:
    """A column of a tenant table."""

    name: str
    type: str


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def schema_revision(conn: asyncpg.Connection) -> str | None:
    """The Alembic revision the database is at."""
    revision: str | None = await conn.fetchval("SELECT version_num FROM alembic_version")
    return revision


@dataclass(frozen=True, slots=True)
class Columns:
    """A tenant table's columns (without tenant_id): those an INSERT may set, and the computed ones."""

    stored: list[Column]
    computed: list[str]
    identity: list[str]


async def table_columns(conn: asyncpg.Connection, *, table: str) -> Columns:
    """The table's columns in order; generated and identity columns are computed, not stored."""
    rows = await conn.fetch(
        "SELECT attname, format_type(atttypid, NULL) AS type, attgenerated <> '' OR attidentity <> '' AS computed, "
        "attidentity <> '' AS identity "
        "FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped "
        # embedding_next holds a running model switch's vectors (embedding_switch): not the tenant's data.
        "AND attname NOT IN ('tenant_id', 'embedding_next') ORDER BY attnum",
        f"public.{table}",
    )
    return Columns(
        stored=[Column(r["attname"], r["type"]) for r in rows if not r["computed"]],
        computed=[r["attname"] for r in rows if r["computed"]],
        identity=[r["attname"] for r in rows if r["identity"]],
    )


async def key_columns(conn: asyncpg.Connection, *, table: str) -> list[str]:
    """The table's primary key columns, in key order."""
    rows = await conn.fetch(
        "SELECT a.attname FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
        "WHERE i.indrelid = $1::regclass AND i.indisprimary ORDER BY k.n",
        f"public.{table}",
    )
    return [r["attname"] for r in rows]


async def stream_rows(
    conn: asyncpg.Connection, *, table: str, tenant_id: str, leave_out: Sequence[str], order: Sequence[str]
) -> AsyncIterator[dict[str, Any]]:
    """The tenant's rows of table as JSON objects without the `leave_out` columns, in `order`.

    conn must be inside a transaction (the rows come through a cursor).
    """
    query = (
        f"SELECT to_jsonb(t) - $2::text[] FROM {_ident(table)} t WHERE t.tenant_id = $1 "
        f"ORDER BY {', '.join(_ident(c) for c in order)}"
    )
    async for record in conn.cursor(query, uuid.UUID(tenant_id), list(leave_out), prefetch=500):
        yield record[0]


async def count_rows(conn: asyncpg.Connection, *, table: str, tenant_id: str) -> int:
    """How many rows of table the tenant has."""
    count: int = await conn.fetchval(
        f"SELECT count(*) FROM {_ident(table)} WHERE tenant_id = $1", uuid.UUID(tenant_id)
    )
    return count


async def insert_rows(
    conn: asyncpg.Connection,
    *,
    table: str,
    tenant_id: str,
    columns: Sequence[str],
    rows: Sequence[dict[str, Any]],
) -> None:
    """Insert JSON rows into table for the tenant; each value is parsed by its column's type."""
    names = ", ".join(_ident(c) for c in columns)
    await conn.execute(
        f"INSERT INTO {_ident(table)} (tenant_id, {names}) "
        f"SELECT $1, {names} FROM jsonb_populate_recordset(NULL::{_ident(table)}, $2::jsonb)",
        uuid.UUID(tenant_id),
        list(rows),
    )


@dataclass(frozen=True, slots=True)
class EmbeddingSource:
    """What a memory's embedding is computed from."""

    id: uuid.UUID
    kind: str
    content: str
    path: str | None
    symbol: str | None
    symbol_kind: str | None
    parent_symbol: str | None
    butler: str | None
    session_id: str | None
    created_at: Any


async def embedding_sources(
    conn: asyncpg.Connection, *, tenant_id: str, ids: Sequence[uuid.UUID]
) -> list[EmbeddingSource]:
    """The memories with these ids, with the columns their embedded text is made of."""
    rows = await conn.fetch(
        "SELECT id, kind, content, path, symbol, symbol_kind, parent_symbol, butler, session_id, created_at "
        "FROM memory WHERE tenant_id = $1 AND id = ANY ($2::uuid[]) ORDER BY id",
        uuid.UUID(tenant_id),
        list(ids),
    )
    return [EmbeddingSource(**dict(r)) for r in rows]


async def set_embeddings(
    conn: asyncpg.Connection, *, tenant_id: str, vectors: Sequence[tuple[uuid.UUID, Any]]
) -> None:
    """Store computed embeddings (the memory_vector trigger copies them)."""
    await conn.executemany(
        "UPDATE memory SET embedding = $3 WHERE tenant_id = $1 AND id = $2",
        [(uuid.UUID(tenant_id), memory_id, vector) for memory_id, vector in vectors],
    )
