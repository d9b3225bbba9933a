"""Database access: target resolution, the pool, codecs and the tenant-scoped transaction."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg
from pgvector.asyncpg import register_vector

from app.errors import ApiError
from app.infra.config import Settings
from app.infra.embedded_pg import (
    DATABASE_NAME,
    ensure_serving_role_hba,
    pgdata_dir,
    start_embedded,
    with_database,
)
from app.infra.secret_files import read_or_create_secret

log = logging.getLogger("recalld.db")

# The role the service logs in as: no superuser, no owner, no BYPASSRLS (migration 0001 creates it).
SERVING_ROLE = "recalld_app"
Connection = asyncpg.Connection
Pool = asyncpg.Pool


class DatabaseUnavailable(Exception):
    """The database cannot serve right now (down, restarting, or no connection free): retry later."""


# Failures that say nothing about the request and pass when the database is back: class 08
# (connection lost), the server shutting down or still starting, too many connections, and the
# socket-level errors of a server that is not listening.
UNAVAILABLE_ERRORS = (
    DatabaseUnavailable,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.TooManyConnectionsError,
    ConnectionError,
)


def _caused_by_outage(exc: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, UNAVAILABLE_ERRORS):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _is_lost(conn: asyncpg.Connection) -> bool:
    try:
        closed: bool = conn.is_closed()
        return closed
    except asyncpg.InterfaceError:
        return True  # the pool already took the dead connection back


@asynccontextmanager
async def acquire(pool: asyncpg.Pool, wait_seconds: float) -> AsyncIterator[asyncpg.Connection]:
    """A pooled connection, waiting at most wait_seconds; DatabaseUnavailable otherwise."""
    try:
        conn = await pool.acquire(timeout=wait_seconds)
    except TimeoutError as exc:
        raise DatabaseUnavailable(f"no database connection became free within {wait_seconds:g} s") from exc
    except OSError as exc:
        # Refused or missing socket while the pool reconnects: the server is down.
        raise DatabaseUnavailable(f"cannot connect to the database: {type(exc).__name__}") from exc
    try:
        yield conn
    except Exception as exc:
        if not isinstance(exc, UNAVAILABLE_ERRORS) and (_caused_by_outage(exc) or _is_lost(conn)):
            # The server went away mid-statement; asyncpg then reports whatever state its
            # protocol was in (InternalClientError, InterfaceError). The cause is the outage.
            raise DatabaseUnavailable("the database connection was lost") from exc
        raise
    finally:
        await pool.release(conn)


# Every tenant table references tenant(id) through a constraint named <table>_tenant_fkey (migrations).
TENANT_FOREIGN_KEY_SUFFIX = "_tenant_fkey"

# A whole unit of work is re-run this many times at most when PostgreSQL aborts it for a
# serialization failure or a deadlock (40001/40P01); the wait between tries grows and is jittered
# so the transactions that collided do not collide again.
RETRY_ATTEMPTS = 3
RETRY_BASE_SECONDS = 0.02


@dataclass(frozen=True, slots=True)
class Database:
    """Where services get connections: from the pool, only around their database work."""

    pool: asyncpg.Pool
    acquire_seconds: float

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection for work outside a tenant transaction (authentication)."""
        async with acquire(self.pool, self.acquire_seconds) as conn:
            yield conn

    @asynccontextmanager
    async def transaction(
        self,
        tenant_ids: Sequence[str],
        *,
        readonly: bool = False,
        synchronous_commit: bool = True,
        snapshot: bool = False,
    ) -> AsyncIterator[asyncpg.Connection]:
        """A connection in one tenant transaction, returned to the pool when the block ends.

        A write whose tenant was deleted after its key was accepted fails the tenant foreign key
        of whatever it inserts first: that is the client's 404, and the transaction stored nothing.
        """
        try:
            async with (
                self.connection() as conn,
                tenant_transaction(
                    conn,
                    tenant_ids,
                    readonly=readonly,
                    synchronous_commit=synchronous_commit,
                    snapshot=snapshot,
                ),
            ):
                yield conn
        except asyncpg.ForeignKeyViolationError as exc:
            if not (exc.constraint_name or "").endswith(TENANT_FOREIGN_KEY_SUFFIX):
                raise
            raise ApiError(
                404,
                "not_found",
                "tenant not found: it was deleted while this request ran; nothing was stored",
            ) from exc

    async def run[T](
        self,
        tenant_ids: Sequence[str],
        work: Callable[[asyncpg.Connection], Awaitable[T]],
        *,
        readonly: bool = False,
        synchronous_commit: bool = True,
    ) -> T:
        """work(conn) in one tenant transaction, re-run whole after a serialization failure or deadlock.

        work must only touch the database through conn: a failed try is rolled back completely,
        so running it again is safe.
        """
        for attempt in range(1, RETRY_ATTEMPTS + 1):
            try:
                async with self.transaction(
                    tenant_ids, readonly=readonly, synchronous_commit=synchronous_commit
                ) as conn:
                    return await work(conn)
            except (asyncpg.SerializationError, asyncpg.DeadlockDetectedError) as exc:
                if attempt == RETRY_ATTEMPTS:
                    raise
                log.warning("transaction aborted (%s), try %d of %d", exc.sqlstate, attempt, RETRY_ATTEMPTS)
                await asyncio.sleep(random.uniform(0.5, 1.5) * RETRY_BASE_SECONDS * 2**attempt)
        raise AssertionError("unreachable: the last try returns or raises")


def normalise_dsn(url: str) -> str:
    """Accept SQLAlchemy-style URLs (postgresql+asyncpg://) as well as plain libpq ones."""
    parts = urlsplit(url)
    scheme = "postgresql" if parts.scheme.startswith("postgres") else parts.scheme
    return urlunsplit((scheme, parts.netloc, parts.path, parts.query, parts.fragment))


async def resolve_dsn(settings: Settings) -> str:
    """The schema owner's DSN (migrations, admin commands); starts the embedded server if needed."""
    if settings.database_url:
        return normalise_dsn(settings.migration_database_url or settings.database_url)
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


def with_login(dsn: str, user: str, password: str) -> str:
    """The same server and database, logged in as another role."""
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


async def set_serving_password(conn: asyncpg.Connection, password: str) -> None:
    """Let the serving role log in with password (run as the owner, after the migrations)."""
    # ALTER ROLE takes no parameters; format(%L) quotes the literal inside PostgreSQL.
    statement: str = await conn.fetchval(
        "SELECT format('ALTER ROLE %I WITH LOGIN PASSWORD %L', $1::text, $2::text)", SERVING_ROLE, password
    )
    await conn.execute(statement)


async def resolve_serving_dsn(settings: Settings, owner_dsn: str) -> str:
    """DSN of the serving role: DATABASE_URL, or the embedded server's recalld_app login."""
    if settings.database_url:
        return normalise_dsn(settings.database_url)
    password = await asyncio.to_thread(read_or_create_secret, settings.serving_password_path)
    pgdata = pgdata_dir(settings.resolved_data_dir)
    conn = await asyncpg.connect(owner_dsn)
    try:
        await set_serving_password(conn, password)
        if await asyncio.to_thread(ensure_serving_role_hba, pgdata, SERVING_ROLE):
            await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()
    return with_login(owner_dsn, SERVING_ROLE, password)


async def _init_connection(conn: asyncpg.Connection) -> None:
    await register_vector(conn)
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def _skip_reset(conn: asyncpg.Connection) -> None:
    """Pool release hook: there is no session state to undo.

    Everything recalld sets is transaction-local (tenant_transaction's set_config(..., true), xact
    advisory locks), and asyncpg itself rolls back a transaction left open. The default reset sent
    RESET ALL, CLOSE ALL and UNLISTEN on every release: a round trip per request for nothing.
    """


async def create_pool(dsn: str, settings: Settings, *, size: int | None = None) -> asyncpg.Pool:
    """A connection pool (the settings' size unless given); created in the app lifespan only."""
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min(settings.pool_min_size, size or settings.pool_min_size),
        max_size=size or settings.pool_max_size,
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
    snapshot: bool = False,
) -> AsyncIterator[asyncpg.Connection]:
    """Open a transaction bounded to tenant_ids by row-level security.

    The service logs in as the serving role, which RLS always binds; the settings are
    transaction-local, so a pooled connection never carries one request's tenant into the next.

    synchronous_commit=False is for reads whose only write is the reference bump: their commit does not wait
    for the WAL flush (an fsync, 3-4 ms here, most of a search's time). A crash can then lose the
    last fraction of a second of reference counts, never a stored memory; user writes stay durable.

    snapshot=True reads every statement from one snapshot (REPEATABLE READ): an export that reads
    table after table sees them as of one moment.
    """
    async with conn.transaction(readonly=readonly, isolation="repeatable_read" if snapshot else None):
        await conn.execute(
            "SELECT set_config('recalld.tenant_ids', $1, true), set_config('synchronous_commit', $2, true)",
            tenant_setting(tenant_ids),
            "on" if synchronous_commit else "off",
        )
        yield conn
