"""SQL for stored markdown/text documents (the whole file, for slices)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg


@dataclass(frozen=True, slots=True)
class StoredDocument:
    """A stored file."""

    path: str
    content: str
    content_hash: str
    scope: str


async def get_document(conn: asyncpg.Connection, *, tenant_id: str, path: str) -> StoredDocument | None:
    """One stored file by path."""
    row = await conn.fetchrow(
        "SELECT path, content, content_hash, scope FROM document WHERE tenant_id = $1 AND path = $2",
        uuid.UUID(tenant_id),
        path,
    )
    return StoredDocument(row["path"], row["content"], row["content_hash"], row["scope"]) if row else None


async def upsert_document(
    conn: asyncpg.Connection, *, tenant_id: str, path: str, content: str, content_hash: str, scope: str
) -> None:
    """Store or replace a file's text."""
    await conn.execute(
        "INSERT INTO document (tenant_id, path, content, content_hash, scope) VALUES ($1, $2, $3, $4, $5) "
        "ON CONFLICT (tenant_id, path) DO UPDATE SET content = EXCLUDED.content, "
        "content_hash = EXCLUDED.content_hash, scope = EXCLUDED.scope, updated_at = clock_timestamp()",
        uuid.UUID(tenant_id),
        path,
        content,
        content_hash,
        scope,
    )


async def forget_content_hash(conn: asyncpg.Connection, *, tenant_id: str, path: str) -> None:
    """Make the next upload of path re-chunk it, whatever its content (a chunk was deleted)."""
    await conn.execute(
        "UPDATE document SET content_hash = '' WHERE tenant_id = $1 AND path = $2", uuid.UUID(tenant_id), path
    )


async def delete_document(conn: asyncpg.Connection, *, tenant_id: str, path: str) -> bool:
    """Delete a file and its chunks; False when the path is unknown."""
    await conn.execute(
        "DELETE FROM memory WHERE tenant_id = $1 AND kind = 'document' AND path = $2",
        uuid.UUID(tenant_id),
        path,
    )
    result: str = await conn.execute(
        "DELETE FROM document WHERE tenant_id = $1 AND path = $2", uuid.UUID(tenant_id), path
    )
    return result.endswith(" 1")


async def list_documents(conn: asyncpg.Connection, *, tenant_id: str) -> list[tuple[str, str]]:
    """(path, content_hash) of every stored file, by path."""
    rows = await conn.fetch(
        "SELECT path, content_hash FROM document WHERE tenant_id = $1 ORDER BY path", uuid.UUID(tenant_id)
    )
    return [(r["path"], r["content_hash"]) for r in rows]
