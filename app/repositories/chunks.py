"""SQL for the chunks of one stored file (documents and code): list, move, and the per-file lock."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """An existing chunk of a document or code file."""

    id: uuid.UUID
    content_hash: str
    start_line: int
    end_line: int


async def chunks_of_path(
    conn: asyncpg.Connection, *, tenant_id: str, kind: str, path: str
) -> list[StoredChunk]:
    """The chunks currently stored for one file."""
    rows = await conn.fetch(
        "SELECT id, content_hash, start_line, end_line FROM memory "
        "WHERE tenant_id = $1 AND kind = $2 AND path = $3 "
        "ORDER BY start_line, id",
        uuid.UUID(tenant_id),
        kind,
        path,
    )
    return [StoredChunk(r["id"], r["content_hash"], r["start_line"], r["end_line"]) for r in rows]


async def move_chunks(
    conn: asyncpg.Connection, *, tenant_id: str, moves: Sequence[tuple[uuid.UUID, int, int]]
) -> None:
    """Update line numbers of kept chunks whose text moved within the file."""
    if moves:
        await conn.executemany(
            "UPDATE memory SET start_line = $3, end_line = $4 WHERE tenant_id = $1 AND id = $2",
            [(uuid.UUID(tenant_id), chunk_id, start, end) for chunk_id, start, end in moves],
        )


async def lock_path(conn: asyncpg.Connection, *, tenant_id: str, path: str) -> None:
    """Serialise concurrent re-uploads of one file within the transaction."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1 || ':' || $2, 0))", tenant_id, path)
