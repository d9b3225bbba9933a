"""Startup checks: schema at head, embedder identity recorded."""

from __future__ import annotations

import asyncio
import json
import logging

import asyncpg

from app.config import Settings
from app.db import normalise_dsn, resolve_dsn, resolve_serving_dsn
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
    except asyncpg.InsufficientPrivilegeError:
        # The serving role may read alembic_version only from revision 0011 on.
        revision = "older than 0011_serving_role"
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


async def prepare_serving_database(settings: Settings) -> tuple[str, str]:
    """(serving DSN, schema revision): the embedded database is migrated and its serving login set
    up here; an external one must already be migrated (`recalld migrate`)."""
    if settings.database_url:
        serving = normalise_dsn(settings.database_url)
        return serving, await ensure_schema(serving, migrate=False)
    owner = await resolve_dsn(settings)
    revision = await ensure_schema(owner, migrate=True)
    return await resolve_serving_dsn(settings, owner), revision


async def owner_dsn(settings: Settings) -> str | None:
    """The schema owner's DSN if this process knows it (embedded, or RECALLD_MIGRATION_DATABASE_URL)."""
    if settings.database_url and not settings.migration_database_url:
        return None
    return await resolve_dsn(settings)


async def check_serving_role(conn: asyncpg.Connection) -> None:
    """Refuse to serve as a role that row-level security would not bind (SPEC R-T4, R-T6)."""
    row = await conn.fetchrow(
        "SELECT current_user AS name, r.rolsuper, r.rolbypassrls, "
        "pg_has_role(current_user, c.relowner, 'MEMBER') AS owner "
        "FROM pg_roles r, pg_class c WHERE r.rolname = current_user AND c.oid = 'public.memory'::regclass"
    )
    assert row is not None
    reasons = [
        what
        for what, present in (
            ("a superuser", row["rolsuper"]),
            ("allowed to bypass row-level security", row["rolbypassrls"]),
            ("the owner of recalld's tables (or a member of the owner role)", row["owner"]),
        )
        if present
    ]
    if reasons:
        raise StartupError(
            f"refusing to serve as database role {row['name']!r}, which is {' and '.join(reasons)}: "
            "tenant isolation would rest on the application alone. Point DATABASE_URL at the serving "
            "role recalld_app (give it a password with RECALLD_SERVING_PASSWORD=... recalld migrate) and "
            "keep the owner's URL in RECALLD_MIGRATION_DATABASE_URL; see 'Operating recalld' in README.md"
        )


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
