"""Database access: target resolution, the pool, codecs and the tenant-scoped transaction."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from pgvector.asyncpg import register_vector

from app.config import Settings
from app.embedded_pg import DATABASE_NAME, start_embedded, with_database

log = logging.getLogger("recalld.db")

APP_ROLE = "recalld_app"
Connection = asyncpg.Connection
Pool = asyncpg.Pool


def normalise_dsn(url: str) -> str:
    """Accept SQLAlchemy-style URLs (postgresql+asyncpg://) as well as plain libpq ones."""
    parts = urlsplit(url)
    scheme = "postgresql" if parts.scheme.startswith("postgres") else parts.scheme
    return urlunsplit((scheme, parts.netloc, parts.path, parts.query, parts.fragment))


async def resolve_dsn(settings: Settings) -> str:
    """DSN of the database recalld uses; starts the embedded server when DATABASE_URL is unset."""
    if settings.database_url:
        return normalise_dsn(settings.database_url)
    server_uri = await asyncio.to_thread(start_embedded, settings.resolved_data_dir)
    conn = await asyncpg.connect(server_uri)
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", DATABASE_NAME)
        if not exists:
            # CREATE DATABASE cannot take parameters; the name is our constant, not user input.
            with contextlib.suppress(asyncpg.DuplicateDatabaseError):  # another process was first
                await conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
    finally:
        await conn.close()
    return with_database(server_uri, DATABASE_NAME)


async def _init_connection(conn: asyncpg.Connection) -> None:
    await register_vector(conn)
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def _skip_reset(conn: asyncpg.Connection) -> None:
    """Pool release hook: there is no session state to undo.

    Everything recalld sets is transaction-local (tenant_transaction's set_config(..., true), xact
    advisory locks), and asyncpg itself rolls back a transaction left open. The default reset sent
    RESET ALL, CLOSE ALL and UNLISTEN on every release: a round trip per request for nothing.
    """


async def create_pool(dsn: str, settings: Settings) -> asyncpg.Pool:
    """The service's connection pool; created in the app lifespan only."""
    pool = await asyncpg.create_pool(
        dsn,
        min_size=settings.pool_min_size,
        max_size=settings.pool_max_size,
        init=_init_connection,
        reset=_skip_reset,
        command_timeout=60,
        # Session defaults, set once per connection: HNSW keeps scanning until enough
        # rows pass the tenant/scope filters instead of returning a post-filtered handful.
        server_settings={
            "hnsw.iterative_scan": "strict_order",
            "hnsw.ef_search": str(settings.hnsw_ef_search),
        },
    )
    assert pool is not None
    return pool


async def connect(dsn: str) -> asyncpg.Connection:
    """A single connection with the service's codecs (CLI and tests)."""
    conn = await asyncpg.connect(dsn)
    await _init_connection(conn)
    return conn


def tenant_setting(tenant_ids: Sequence[str]) -> str:
    """Value of recalld.tenant_ids that the row-level-security policies read."""
    return ",".join(str(t) for t in tenant_ids)


@asynccontextmanager
async def tenant_transaction(
    conn: asyncpg.Connection,
    tenant_ids: Sequence[str],
    *,
    readonly: bool = False,
    synchronous_commit: bool = True,
) -> AsyncIterator[asyncpg.Connection]:
    """Open a transaction bounded to tenant_ids by row-level security.

    The role switch makes RLS apply even when the login user owns the tables or is a superuser
    (embedded mode, docker-compose); both settings are transaction-local, so a pooled connection
    never carries one request's tenant into the next.

    synchronous_commit=False is for reads whose only write is the reference bump: their commit does not wait
    for the WAL flush (an fsync, 3-4 ms here, most of a search's time). A crash can then lose the
    last fraction of a second of reference counts, never a stored memory; user writes stay durable.
    """
    async with conn.transaction(readonly=readonly):
        await conn.execute(
            "SELECT set_config('role', $1, true), set_config('recalld.tenant_ids', $2, true), "
            "set_config('synchronous_commit', $3, true)",
            APP_ROLE,
            tenant_setting(tenant_ids),
            "on" if synchronous_commit else "off",
        )
        yield conn
