"""SQL of a running embedding-model switch: its record, the pending column, the batches, the cut-over.

While a switch runs, every memory has a second embedding column, `embedding_next`, typed for the
new model (`vector(n)` or `halfvec(n)`, embedding_storage.column_type) and added by the switch's
start. The service keeps answering from `embedding` (and its copy in memory_vector); the
background worker fills `embedding_next`, and writes made meanwhile fill both. The cut-over drops
the old column and renames the new one in its place (catalogue changes, no table rewrite), then
refills memory_vector at the new type. All of it is DDL: only the schema owner may.

A guard trigger keeps a pending vector from going stale: an update that changes a memory's
embedding without giving its new-model twin (a write that did not know of the switch) clears
`embedding_next`, so the worker embeds that row again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg
from pgvector import Vector as PgVector

from app.embeddings.base import Vector
from app.repositories.embedding_storage import column_type

SWITCH_KEY = "embedding_switch"
# The running switch's id (NULL when none runs), for a write's own statement to compare with the
# switch its new-model vectors were embedded for (memories.insert_memories).
RUNNING_SWITCH_ID = f"(SELECT value ->> 'id' FROM system_config WHERE key = '{SWITCH_KEY}')"

_GUARD_FUNCTION = """
CREATE OR REPLACE FUNCTION memory_embedding_next_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.embedding IS DISTINCT FROM OLD.embedding
       AND NEW.embedding_next IS NOT DISTINCT FROM OLD.embedding_next THEN
        NEW.embedding_next := NULL;
    END IF;
    RETURN NEW;
END
$$
"""


async def switch_record(conn: asyncpg.Connection) -> dict[str, Any] | None:
    """The running switch's record ({"target", "state", "progress", ...}), or None."""
    value: dict[str, Any] | None = await conn.fetchval(
        "SELECT value FROM system_config WHERE key = $1", SWITCH_KEY
    )
    return value


async def put_switch_record(conn: asyncpg.Connection, record: dict[str, Any]) -> None:
    """Create or replace the switch's record."""
    await conn.execute(
        "INSERT INTO system_config (key, value) VALUES ($1, $2::jsonb) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        SWITCH_KEY,
        record,
    )


async def merge_switch_record(conn: asyncpg.Connection, fields: dict[str, Any]) -> bool:
    """Merge fields into the record if there still is one; whether there was."""
    status: str = await conn.execute(
        "UPDATE system_config SET value = value || $2::jsonb WHERE key = $1", SWITCH_KEY, fields
    )
    return status.endswith(" 1")


async def delete_switch_record(conn: asyncpg.Connection) -> None:
    """Forget the switch (finished or aborted)."""
    await conn.execute("DELETE FROM system_config WHERE key = $1", SWITCH_KEY)


async def pending_column_type(conn: asyncpg.Connection) -> str | None:
    """The type of memory.embedding_next, or None when no switch added it."""
    value: str | None = await conn.fetchval(
        "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
        "WHERE a.attrelid = 'memory'::regclass AND a.attname = 'embedding_next' AND NOT a.attisdropped"
    )
    return value


def _checked(column: str) -> str:
    if column != column_type(int(column.split("(")[1].rstrip(")"))):
        raise ValueError(f"not an embedding column type: {column!r}")
    return column


async def add_pending_column(conn: asyncpg.Connection, column: str) -> None:
    """Add memory.embedding_next of type `column` (from column_type) and its guard trigger (DDL)."""
    # The type is one column_type() made (checked), never client text.
    await conn.execute(
        f"""
        ALTER TABLE memory ADD COLUMN embedding_next {_checked(column)};
        {_GUARD_FUNCTION};
        CREATE TRIGGER memory_embedding_next_guard BEFORE UPDATE OF embedding ON memory
            FOR EACH ROW EXECUTE FUNCTION memory_embedding_next_guard();
        """
    )


async def drop_pending_column(conn: asyncpg.Connection) -> None:
    """Remove memory.embedding_next and its guard (an aborted switch); nothing else changes."""
    await conn.execute(
        """
        DROP TRIGGER IF EXISTS memory_embedding_next_guard ON memory;
        DROP FUNCTION IF EXISTS memory_embedding_next_guard();
        ALTER TABLE memory DROP COLUMN IF EXISTS embedding_next;
        """
    )


@dataclass(frozen=True, slots=True)
class PendingRow:
    """A memory without a new-model vector: the columns its embedded text is made of (embedding_texts)."""

    tenant_id: uuid.UUID
    id: uuid.UUID
    kind: str
    content: str
    path: str | None
    symbol: str | None
    symbol_kind: str | None
    parent_symbol: str | None


async def pending_rows(
    conn: asyncpg.Connection, *, after: tuple[uuid.UUID, uuid.UUID] | None, limit: int
) -> list[PendingRow]:
    """The next memories (tenant, id order, after `after`) with no embedding_next, of one tenant.

    Run after see_every_tenant. Only the first row's tenant is returned, so a batch never mixes
    tenants.
    """
    start_tenant, start_id = after or (uuid.UUID(int=0), uuid.UUID(int=0))
    rows = await conn.fetch(
        "SELECT tenant_id, id, kind, content, path, symbol, symbol_kind, parent_symbol FROM memory "
        "WHERE (tenant_id, id) > ($1, $2) AND embedding_next IS NULL ORDER BY tenant_id, id LIMIT $3",
        start_tenant,
        start_id,
        limit,
    )
    first = rows[0]["tenant_id"] if rows else None
    return [PendingRow(**dict(r)) for r in rows if r["tenant_id"] == first]


async def store_pending(
    conn: asyncpg.Connection,
    *,
    switch_id: str,
    tenant_id: uuid.UUID,
    vectors: list[tuple[PendingRow, Vector]],
) -> int:
    """Store the switch switch_id's new-model vectors of rows whose embedded text is still the one read; how many.

    Only the text's columns are compared, not the row version: searches count references on the
    very rows a worker is embedding (an UPDATE per search), and a version check then failed on
    every pass, so the switch never finished under steady searches. Rows another transaction
    holds locked are skipped, not waited for: the worker is then never one side of a deadlock
    with a search counting references on the same rows in another order. Skipped rows, and rows
    whose text changed meanwhile, are left for the next pass. None is stored unless switch_id is
    the switch recorded now, read in this statement (as memories.insert_memories does): an abort and
    a new switch may come between the worker's reading the record and this.
    """
    rows = [row for row, _ in vectors]
    ids = [row.id for row in rows]
    status: str = await conn.execute(
        "UPDATE memory m SET embedding_next = v.embedding "
        "FROM unnest($2::uuid[], $3::vector[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], "
        "$9::text[]) AS v(id, embedding, kind, content, path, symbol, symbol_kind, parent_symbol) "
        "WHERE m.tenant_id = $1 AND m.id = v.id AND m.embedding_next IS NULL AND m.kind = v.kind "
        "AND m.content = v.content AND m.path IS NOT DISTINCT FROM v.path "
        "AND m.symbol IS NOT DISTINCT FROM v.symbol AND m.symbol_kind IS NOT DISTINCT FROM v.symbol_kind "
        "AND m.parent_symbol IS NOT DISTINCT FROM v.parent_symbol "
        "AND m.id IN (SELECT id FROM memory WHERE tenant_id = $1 AND id = ANY($2::uuid[]) "
        f"FOR NO KEY UPDATE SKIP LOCKED) AND $10::text = {RUNNING_SWITCH_ID}",
        tenant_id,
        ids,
        # Wrapped: an array of bare numpy vectors would be encoded as one two-dimensional array;
        # sent as vector[] whatever the column's type (pgvector casts vector to halfvec on assignment).
        [PgVector(vector) for _, vector in vectors],
        [row.kind for row in rows],
        [row.content for row in rows],
        [row.path for row in rows],
        [row.symbol for row in rows],
        [row.symbol_kind for row in rows],
        [row.parent_symbol for row in rows],
        switch_id,
    )
    return int(status.split()[-1])


async def pending_counts(conn: asyncpg.Connection) -> tuple[int, int]:
    """(memories, memories with a new-model vector), over the tenants this transaction may see."""
    row = await conn.fetchrow("SELECT count(*) AS total, count(embedding_next) AS done FROM memory")
    assert row is not None
    return int(row["total"]), int(row["done"])


async def lock_for_cut_over(conn: asyncpg.Connection, *, wait_seconds: float) -> None:
    """Take memory and memory_vector exclusively (inside the cut-over's transaction), waiting at most so long."""
    await conn.execute(f"SET LOCAL lock_timeout = '{int(wait_seconds * 1000)}ms'")
    await conn.execute("LOCK TABLE memory, memory_vector IN ACCESS EXCLUSIVE MODE")


async def cut_over(conn: asyncpg.Connection, column: str) -> None:
    """Put the new-model vectors in place of the old ones (inside a transaction holding lock_for_cut_over).

    memory: the old column is dropped and embedding_next renamed in its place (no rewrite). The
    update trigger names the column, so it is made again from its own definition. memory_vector:
    emptied, retyped, in line again (STORAGE PLAIN) and refilled tenant by tenant in key order;
    the per-tenant HNSW indexes, of the old type, are dropped and the upkeep loop builds new ones
    (the exact scan serves meanwhile).
    """
    column = _checked(column)
    names = await conn.fetch(
        "SELECT c.relname FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
        "WHERE i.indrelid = 'memory_vector'::regclass AND c.relname LIKE 'memory_vector_hnsw_%'"
    )
    for row in names:
        statement: str = await conn.fetchval("SELECT format('DROP INDEX %I', $1::text)", row["relname"])
        await conn.execute(statement)
    trigger: str = await conn.fetchval(
        "SELECT pg_get_triggerdef(oid) FROM pg_trigger "
        "WHERE tgrelid = 'memory'::regclass AND tgname = 'memory_vector_update'"
    )
    await conn.execute(
        f"""
        DROP TRIGGER memory_vector_update ON memory;
        DROP TRIGGER memory_embedding_next_guard ON memory;
        DROP FUNCTION memory_embedding_next_guard();
        ALTER TABLE memory DROP COLUMN embedding;
        ALTER TABLE memory RENAME COLUMN embedding_next TO embedding;
        TRUNCATE memory_vector;
        ALTER TABLE memory_vector ALTER COLUMN embedding TYPE {column};
        ALTER TABLE memory_vector ALTER COLUMN embedding SET STORAGE PLAIN;
        INSERT INTO memory_vector (tenant_id, memory_id, embedding)
            SELECT tenant_id, id, embedding FROM memory WHERE embedding IS NOT NULL ORDER BY tenant_id, id;
        """
    )
    await conn.execute(trigger)


async def replace_recorded_model(conn: asyncpg.Connection, model: dict[str, Any]) -> None:
    """Record the model the stored vectors now belong to (the cut-over's transaction)."""
    await conn.execute("UPDATE system_config SET value = $1::jsonb WHERE key = 'embedding'", model)
