"""SQL of the embedding columns: the recorded model, the column type, and resizing while no vector is stored.

memory.embedding and its narrow copy memory_vector.embedding always have the same type:
`vector(n)` up to HNSW_VECTOR_MAX_DIM dimensions, `halfvec(n)` beyond (pgvector's HNSW indexes
take up to 2,000 and 4,000 dimensions). Resizing is DDL: only the schema owner may.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg

HNSW_VECTOR_MAX_DIM = 2000
HNSW_HALFVEC_MAX_DIM = 4000


def column_type(dim: int) -> str:
    """The column type of a dim-dimension model; ValueError past what HNSW can index."""
    if dim < 1 or dim > HNSW_HALFVEC_MAX_DIM:
        raise ValueError(
            f"an embedding dimension must be between 1 and {HNSW_HALFVEC_MAX_DIM} (HNSW's limit for halfvec), not {dim}"
        )
    return f"vector({dim})" if dim <= HNSW_VECTOR_MAX_DIM else f"halfvec({dim})"


def cosine_opclass(column: str) -> str:
    """The HNSW operator class for cosine distance on a column of this type."""
    return "halfvec_cosine_ops" if column.startswith("halfvec") else "vector_cosine_ops"


async def recorded_model(conn: asyncpg.Connection) -> dict[str, Any] | None:
    """The {"provider", "model", "dim"} the stored vectors belong to, or None before the first start."""
    value = await conn.fetchval("SELECT value FROM system_config WHERE key = 'embedding'")
    # Versions before 0017 recorded the object as a JSON string inside the jsonb value.
    recorded: dict[str, Any] | None = json.loads(value) if isinstance(value, str) else value
    return recorded


async def record_model(conn: asyncpg.Connection, model: dict[str, Any]) -> None:
    """Record the model the stored vectors belong to, unless one already is (a connection of app.infra.db)."""
    await conn.execute(
        "INSERT INTO system_config (key, value) VALUES ('embedding', $1::jsonb) ON CONFLICT (key) DO NOTHING",
        model,
    )


async def stored_column_type(conn: asyncpg.Connection) -> str:
    """The embedding column's type as PostgreSQL spells it, e.g. vector(384) or halfvec(3072)."""
    value: str = await conn.fetchval(
        "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
        "WHERE a.attrelid = 'memory_vector'::regclass AND a.attname = 'embedding'"
    )
    return value


async def any_vector_stored(conn: asyncpg.Connection) -> bool:
    """Whether any memory holds a vector (after see_every_tenant: row-level security binds the owner too)."""
    found: bool = await conn.fetchval("SELECT EXISTS (SELECT 1 FROM memory WHERE embedding IS NOT NULL)")
    return found


async def vector_counts(conn: asyncpg.Connection) -> tuple[int, int]:
    """(memories, memories with a vector), over the tenants row-level security lets this transaction see."""
    row = await conn.fetchrow("SELECT count(*) AS total, count(embedding) AS embedded FROM memory")
    assert row is not None
    return int(row["total"]), int(row["embedded"])


async def resize_columns(conn: asyncpg.Connection, column: str) -> None:
    """Give both embedding columns the type `column` (from column_type); inside a transaction, no vector stored.

    The update trigger names the column (UPDATE OF, WHEN), which PostgreSQL refuses to retype
    under it, so it is dropped and made again from its own definition as the catalogue prints it
    (whatever the latest migration made it); leftover per-tenant indexes (of tenants whose rows
    are gone) would keep the old operator class, so they go too, and the upkeep loop builds new
    ones as tenants grow. memory_vector keeps its vectors in line (STORAGE PLAIN, migration 0014),
    which a change of type resets.
    """
    if column != column_type(int(column.split("(")[1].rstrip(")"))):
        raise ValueError(f"not an embedding column type: {column!r}")
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
    # The type is one column_type() made (checked above), never client text.
    await conn.execute(
        f"""
        DROP TRIGGER memory_vector_update ON memory;
        ALTER TABLE memory_vector ALTER COLUMN embedding TYPE {column};
        ALTER TABLE memory_vector ALTER COLUMN embedding SET STORAGE PLAIN;
        ALTER TABLE memory ALTER COLUMN embedding TYPE {column};
        """
    )
    await conn.execute(trigger)
