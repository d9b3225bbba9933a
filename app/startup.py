"""Startup checks: schema at head, embedder identity recorded."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import asyncpg

from app.embeddings.base import EmbedderIdentity, EmbeddingUnavailable
from app.embeddings.factory import EmbeddingConfigError, provider, serve_hint, switch_command
from app.infra.config import Settings
from app.infra.db import connect, normalise_dsn, resolve_dsn, resolve_serving_dsn
from app.infra.migrate import current_revision, head_revision, upgrade_to_head
from app.repositories import embedding_storage as storage
from app.repositories.embedding_switch import switch_record
from app.repositories.vector_indexes import see_every_tenant

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


def _mismatch(
    recorded: dict[str, Any], wanted: dict[str, Any], switch: dict[str, Any] | None
) -> StartupError:
    # One line, with the settings that serve what is stored (keys in a fixed order: jsonb sorts them)
    # and the command that moves the stored vectors to the configured model.
    stored = {key: recorded.get(key) for key in ("provider", "model", "dim")}
    if (
        switch is not None
        and wanted.get("dim") in (None, switch["target"].get("dim"))
        and all(switch["target"].get(key) == wanted.get(key) for key in ("provider", "model"))
    ):
        return StartupError(
            f"this database holds embeddings of {stored} and a switch to {wanted} is running; start with "
            f"{serve_hint(recorded)} until it completes (`recalld embeddings status` shows its progress)"
        )
    fix = switch_command(wanted)
    return StartupError(
        f"this database holds embeddings of {stored}, but the configured embedder is {wanted}; "
        f"start with {serve_hint(recorded)} to serve the stored vectors, and run `{fix}` "
        "(with the stored model configured) to re-embed them with the configured one"
    )


async def prepare_embedding_storage(
    conn: asyncpg.Connection, settings: Settings, *, owner: bool, record: bool = True
) -> EmbedderIdentity | None:
    """The configured model's identity, checked against the one the stored vectors belong to.

    On the first start (nothing recorded) the embedding columns take the model's dimension
    (`vector(n)`, or `halfvec(n)` past 2,000) and the model is recorded; only the schema owner may
    resize (owner=True), the serving role only compares and records. `recalld migrate` resizes
    without recording (record=False): the first `serve` records the model it runs. Raises
    StartupError, whose message names what to run or set, before any model is loaded.
    """
    try:
        chosen = provider(settings.embedding_provider)
        if chosen is None:
            return None  # keyword-only: stored vectors stay untouched, new rows get none
        model, dim = chosen.model(settings), chosen.dim(settings)
    except EmbeddingConfigError as exc:
        raise StartupError(str(exc)) from None
    recorded = await storage.recorded_model(conn)
    same_model = recorded is not None and (recorded.get("provider"), recorded.get("model")) == (
        settings.embedding_provider,
        model,
    )
    if recorded is not None and not same_model:
        # Refused before asking an endpoint anything: another model's vectors are stored.
        raise _mismatch(
            recorded,
            {"provider": settings.embedding_provider, "model": model, "dim": dim},
            await switch_record(conn),
        )
    if dim is None and recorded is not None:
        dim = int(recorded["dim"])
    if dim is None:
        try:
            dim = await asyncio.to_thread(chosen.probe_dim, settings)
        except EmbeddingUnavailable as exc:
            raise StartupError(
                f"cannot ask the embedding endpoint for its dimension ({exc}); set RECALLD_EMBEDDING_DIM"
            ) from None
    identity = EmbedderIdentity(settings.embedding_provider, model, dim)
    wanted = {"provider": identity.provider, "model": identity.model, "dim": identity.dim}
    if recorded is not None:
        if recorded != wanted:
            raise _mismatch(recorded, wanted, await switch_record(conn))
        return identity
    try:
        column = storage.column_type(dim)
    except ValueError as exc:
        raise StartupError(str(exc)) from None
    stored = await storage.stored_column_type(conn)
    if stored != column:
        if not owner:
            raise StartupError(
                f"the embedding columns are {stored} but a {dim}-dimension model needs {column}; run "
                "`recalld migrate` with this RECALLD_EMBEDDING_* configuration (as the schema owner) first"
            )
        async with conn.transaction():
            await see_every_tenant(conn)
            if await storage.any_vector_stored(conn):
                raise StartupError(
                    f"the database holds {stored} vectors of an unrecorded model; start with the model "
                    "that wrote them"
                )
            await storage.resize_columns(conn, column)
    if not record:
        return identity
    await storage.record_model(conn, wanted)
    # Two processes starting together: the first record wins, the other must match it.
    recorded = await storage.recorded_model(conn)
    if recorded != wanted:
        assert recorded is not None
        raise _mismatch(recorded, wanted, None)
    log.info("embedding columns are %s for %s/%s", column, identity.provider, identity.model)
    return identity


async def settle_embedding_storage(settings: Settings, serving_dsn: str) -> EmbedderIdentity | None:
    """prepare_embedding_storage as the schema owner when this process knows its login, else as the serving role."""
    owner = await owner_dsn(settings)
    conn = await connect(owner or serving_dsn)
    try:
        return await prepare_embedding_storage(conn, settings, owner=owner is not None)
    finally:
        await conn.close()
