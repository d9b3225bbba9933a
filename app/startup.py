"""Startup checks: schema at head, embedder identity recorded, keyword ranker detected."""

from __future__ import annotations

import asyncio
import json
import logging

import asyncpg

from app.config import Settings
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


async def detect_keyword_ranker(conn: asyncpg.Connection, settings: Settings) -> str:
    """bm25 when pg_textsearch is loaded and its index exists (and not disabled), else fulltext."""
    has_bm25 = await conn.fetchval("SELECT to_regclass('public.memory_search_text_bm25') IS NOT NULL")
    if settings.keyword_ranker == "bm25" and not has_bm25:
        raise StartupError(
            "RECALLD_KEYWORD_RANKER=bm25 but pg_textsearch is not loaded or its index is missing "
            "(it needs shared_preload_libraries = 'pg_textsearch' before `recalld migrate`)"
        )
    if settings.keyword_ranker == "fulltext" or not has_bm25:
        return "fulltext"
    return "bm25"


async def rebuild_bm25_after_restart(conn: asyncpg.Connection) -> bool:
    """Rebuild the BM25 index once per PostgreSQL start; True when it was rebuilt.

    pg_textsearch 0.6.1 keeps its index in memory segments that do not survive a server restart
    (clean or crash): afterwards the index answers nothing for rows written before. The heap is
    intact, so rebuilding from it restores every acknowledged row; the postmaster start time
    recorded with the rebuild makes every later recalld process on the same server skip it.
    """
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(72410003)")
        started = str(await conn.fetchval("SELECT pg_postmaster_start_time()"))
        recorded = await conn.fetchval(
            "SELECT value ->> 'server_started' FROM system_config WHERE key = 'bm25_rebuild'"
        )
        if recorded == started:
            return False
        await conn.execute("REINDEX INDEX memory_search_text_bm25")
        await conn.execute(
            "INSERT INTO system_config (key, value) VALUES ('bm25_rebuild', jsonb_build_object('server_started', $1::text)) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            started,
        )
    return True


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
