"""Startup checks: schema at head, embedder identity recorded."""

from __future__ import annotations

import asyncio
import json
import logging

import asyncpg

from app.embeddings.base import EmbedderIdentity
from app.migrate import current_revision, head_revision, upgrade_to_head

log = logging.getLogger("recalld.startup")


class StartupError(RuntimeError):
    """The service must not start; the message says what to do."""


async def ensure_schema(dsn: str, *, migrate: bool) -> str:
    """Bring the schema to head (when allowed) and return the revision; refuse when behind."""
    head = head_revision()
    conn = await asyncpg.connect(dsn)
    try:
        revision = await current_revision(conn)
    finally:
        await conn.close()
    if revision == head:
        return head
    if not migrate:
        raise StartupError(
            f"database schema is at revision {revision or 'none'} but this recalld needs {head}; "
            "run `recalld migrate` against this DATABASE_URL first"
        )
    await asyncio.to_thread(upgrade_to_head, dsn)
    return head


async def check_embedder_identity(conn: asyncpg.Connection, identity: EmbedderIdentity | None) -> None:
    """Record the embedding model on first start; refuse to mix vectors of another model later."""
    row = await conn.fetchval("SELECT value FROM system_config WHERE key = 'embedding'")
    recorded = json.loads(row) if isinstance(row, str) else row
    if identity is None:
        return  # keyword-only: stored vectors stay untouched, new rows get none
    wanted = {"provider": identity.provider, "model": identity.model, "dim": identity.dim}
    if recorded is None:
        await conn.execute(
            "INSERT INTO system_config (key, value) VALUES ('embedding', $1::jsonb) ON CONFLICT (key) DO NOTHING",
            json.dumps(wanted),
        )
        return
    if recorded != wanted:
        raise StartupError(
            f"this database holds embeddings of {recorded}, but the configured embedder is {wanted}; "
            "use the same provider/model, or re-embed into a fresh database"
        )
