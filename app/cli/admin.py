"""Subcommands that act on the database directly: serve, migrate, tenants, keys, scopes."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import asyncpg

from app.auth import KEY_PREFIX
from app.cli.common import CliError, expiry, prepare_database, when, with_connection
from app.errors import ApiError
from app.infra.config import Settings
from app.infra.db import (
    SERVING_ROLE,
    Database,
    connect,
    create_pool,
    normalise_dsn,
    resolve_dsn,
    set_serving_password,
)
from app.services import tenants as tenant_service
from app.startup import prepare_embedding_storage, settle_embedding_storage

if TYPE_CHECKING:
    import uvicorn
    from fastapi import FastAPI

    from app.services.embedding_switch import SwitchStatus


def build_server(app: FastAPI, settings: Settings) -> uvicorn.Server:
    """The uvicorn server `recalld serve` runs (also used by tests that need a real HTTP server)."""
    import uvicorn

    from app.redaction import redact_access_log

    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=settings.log_level)
    redact_access_log()  # after uvicorn.Config, which (re)configures its loggers
    return uvicorn.Server(config)


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from app.main import create_app

    settings = settings.model_copy(
        update={"host": args.host or settings.host, "port": args.port or settings.port}
    )

    # The bootstrap writes tenant and api_key: only the owner may. Without an owner URL an external
    # database's tenants and keys are created with the admin commands instead.
    can_bootstrap = settings.database_url is None or settings.migration_database_url is not None

    async def prepare() -> str | None:
        key: str | None = None
        if can_bootstrap:
            key = await with_connection(
                settings, lambda conn: tenant_service.bootstrap(conn, settings.admin_key_path)
            )
        # The embedding model is checked (and the columns sized) here, so a start that cannot serve
        # says why in one line before anything claims to listen.
        serving = (
            normalise_dsn(settings.database_url) if settings.database_url else await resolve_dsn(settings)
        )
        await settle_embedding_storage(settings, serving)
        return key

    key = asyncio.run(prepare())
    # From here on (not before: a start that fails says so in one line) the log says which keyword
    # ranker and embedder are active (SPEC §1: logs and /readyz).
    logging.getLogger("recalld").setLevel(settings.log_level.upper())
    if key is not None:
        print(
            f"Created tenant 'default' with an admin key (shown once, also saved to {settings.admin_key_path}):\n"
            f"  {key}",
            flush=True,
        )
    print(f"recalld listening on http://{settings.host}:{settings.port} (docs at /docs)", flush=True)
    # uvicorn shuts down gracefully, then re-raises the signal it caught to the previous handler.
    # Make that handler a normal exit, so atexit stops the embedded PostgreSQL as well.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    build_server(create_app(settings), settings).run()
    return 0


def cmd_migrate(_: argparse.Namespace, settings: Settings) -> int:
    async def migrate() -> None:
        dsn = await prepare_database(settings, migrate=True)
        # Columns sized for the configured model while none holds a vector; `serve` records the model.
        conn = await connect(dsn)
        try:
            await prepare_embedding_storage(conn, settings, owner=True, record=False)
        finally:
            await conn.close()
        if settings.serving_password:
            conn = await connect(dsn)
            try:
                await set_serving_password(conn, settings.serving_password)
            finally:
                await conn.close()
            print(f"serving role {SERVING_ROLE} may log in with RECALLD_SERVING_PASSWORD", file=sys.stderr)

    asyncio.run(migrate())
    print("database schema is at head")
    return 0


def cmd_tenants(args: argparse.Namespace, settings: Settings) -> int:
    if args.tenants_command == "delete" and not args.yes:
        raise CliError(
            f"this deletes tenant {args.name!r} with all its memories, documents, code files and keys, "
            "for good; pass --yes to do it"
        )

    async def work(conn: asyncpg.Connection) -> None:
        if args.tenants_command == "create":
            print((await tenant_service.create_tenant(conn, args.name)).id)
        elif args.tenants_command == "delete":
            gone = await tenant_service.delete_tenant_by_name(conn, args.name)
            print(
                f"deleted tenant {gone.name!r} ({gone.id}): {gone.memories} memories, "
                f"{gone.live_keys} live keys",
                file=sys.stderr,
            )
        else:
            print("NAME\tID\tCREATED\tMEMORIES\tBYTES\tLIVE_KEYS")
            for t in await tenant_service.tenant_summaries(conn):
                print(f"{t.name}\t{t.id}\t{when(t.created_at)}\t{t.memories}\t{t.bytes}\t{t.live_keys}")

    asyncio.run(with_connection(settings, work))
    return 0


def cmd_keys(args: argparse.Namespace, settings: Settings) -> int:
    async def work(conn: asyncpg.Connection) -> None:
        if args.keys_command == "create":
            print(
                await tenant_service.create_key(
                    conn, tenant=args.tenant, role=args.role, operator=args.operator, expires_at=expiry(args)
                )
            )
        elif args.keys_command == "list":
            now = datetime.now(UTC)
            print("TENANT\tPREFIX\tROLE\tOPERATOR\tCREATED\tLAST_USED\tEXPIRES\tSTATUS")
            for k in await tenant_service.list_keys(conn, tenant=args.tenant):
                print(
                    f"{k.tenant_name}\t{KEY_PREFIX}{k.prefix}\t{k.role}\t{'yes' if k.operator else 'no'}\t"
                    f"{when(k.created_at)}\t{when(k.last_used_at)}\t{when(k.expires_at)}\t"
                    f"{tenant_service.key_status(k, now)}"
                )
        elif args.keys_command == "rotate":
            rotation = await tenant_service.rotate_key(
                conn, args.key, tenant=args.tenant, grace=args.grace, expires_at=expiry(args)
            )
            print(rotation.plain, flush=True)
            print(
                f"rotated {KEY_PREFIX}{rotation.old.prefix} of tenant {rotation.old.tenant_name!r}: "
                f"it stays valid until {when(rotation.old_valid_until)}",
                file=sys.stderr,
            )
        else:
            await tenant_service.revoke_key(conn, args.key, tenant=args.tenant)
            print("revoked 1 key", file=sys.stderr)

    asyncio.run(with_connection(settings, work))
    return 0


def cmd_vectors(args: argparse.Namespace, settings: Settings) -> int:
    from app.services.maintenance import maintain
    from app.services.vector_indexes import sweep

    if args.every is not None:
        # A maintenance process beside a `serve` that has no owner login (the Docker setup):
        # the service's own upkeep loop (statistics too), which reconnects after database restarts.
        logging.getLogger("recalld.vector_indexes").setLevel(logging.INFO)
        logging.getLogger("recalld.maintenance").setLevel(logging.INFO)

        async def forever() -> None:
            owner = await prepare_database(settings)
            await maintain(
                owner,
                min_rows=settings.exact_scan_max_rows,
                sweep_interval=args.every,
                statistics_interval=settings.statistics_check_seconds,
                cache={},
            )

        asyncio.run(forever())
        return 0

    async def work(conn: asyncpg.Connection) -> None:
        result = await sweep(conn, min_rows=settings.exact_scan_max_rows)
        for tenant in result.built:
            print(f"built\t{tenant}")
        for name in result.dropped:
            print(f"dropped\t{name}")
        for tenant in result.failed:
            print(f"failed\t{tenant}")
        if result.failed:
            raise CliError(f"{len(result.failed)} index build(s) failed; run the command again")

    asyncio.run(with_connection(settings, work))
    return 0


def cmd_scopes(args: argparse.Namespace, settings: Settings) -> int:
    from app.services.scopes import check_scope_name, parse_butler_toml, store_scope_settings

    try:
        text = Path(args.file).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {args.file}: {exc}") from exc
    try:
        name, scope_settings = parse_butler_toml(text)
    except ApiError as exc:
        problems = "".join(
            f"\n  {'.'.join(str(p) for p in d.get('loc', ()))}: {d.get('msg')}" for d in exc.details or ()
        )
        raise CliError(f"{args.file}: {exc.message}{problems}") from exc
    scope = args.scope or name
    if not scope:
        raise CliError("butler.toml has no [butler] name; pass --scope")
    check_scope_name(scope)

    async def work() -> None:
        # The service path, over a one-connection pool of the owner's DSN.
        pool = await create_pool(await prepare_database(settings), settings, size=1)
        try:
            db = Database(pool, settings.pool_acquire_timeout)
            async with db.connection() as conn:
                tenant = await tenant_service.tenant_by_name(conn, args.tenant)
            await store_scope_settings(db, tenant_id=tenant.id, scope=scope, settings=scope_settings)
        finally:
            await pool.close()
        print(f"imported settings for scope {scope!r} of tenant {args.tenant!r}", file=sys.stderr)

    asyncio.run(work())
    return 0


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
        if seconds >= 3600
        else f"{seconds // 60}m{seconds % 60:02d}s"
    )


def _print_switch(conn_status: SwitchStatus) -> None:
    from app.services.embedding_switch import progress_view

    view = progress_view(conn_status.record, done=conn_status.done, total=conn_status.total)
    target = view["target"]
    share = 100.0 * view["done"] / view["total"] if view["total"] else 100.0
    print(
        f"switch: to {target['provider']}/{target['model']}, {target['dim']} dimensions "
        f"(started {view['started_at']}): {view['done']}/{view['total']} memories ({share:.1f} %)"
    )
    if not conn_status.worker_alive:
        print(
            "switch worker: not running; a `recalld serve` with the schema owner's login (embedded, or "
            "RECALLD_MIGRATION_DATABASE_URL) runs it, and resumes where it stopped"
        )
        if view["state"] != "running":  # why it stopped, when it said: a failure, a provider it waited for
            print(f"switch worker's last state: {view['state']}")
        return
    eta = view["eta_seconds"]
    print(
        f"switch rate: {view['rate_per_second']} memories/s, ETA "
        f"{'unknown' if eta is None else _duration(eta)}; state: {view['state']}"
    )


def cmd_embeddings(args: argparse.Namespace, settings: Settings) -> int:
    """`recalld embeddings status | switch | abort`: the stored vectors' model, and changing it."""
    from app.repositories import embedding_storage as storage
    from app.repositories.vector_indexes import see_every_tenant
    from app.services import embedding_switch as switching

    async def status(conn: asyncpg.Connection) -> None:
        async with conn.transaction():
            await see_every_tenant(conn)
            recorded = await storage.recorded_model(conn)
            column = await storage.stored_column_type(conn)
            total, embedded = await storage.vector_counts(conn)
        if recorded is None:
            print("model: none recorded yet (the first `serve` with an embedding provider records it)")
        else:
            print(f"model: {recorded['provider']}/{recorded['model']}, {recorded['dim']} dimensions")
        print(f"columns: {column}")
        print(f"memories: {total}, with a vector: {embedded}")
        running = await switching.switch_status(conn)
        if running is not None:
            _print_switch(running)

    async def switch(conn: asyncpg.Connection) -> None:
        try:
            record = await switching.start_switch(
                conn,
                settings,
                provider_name=args.provider,
                model=args.model,
                dim=args.dim,
                base_url=args.base_url,
                api_key_file=args.api_key_file.expanduser().resolve() if args.api_key_file else None,
            )
        except switching.SwitchError as exc:
            raise CliError(str(exc)) from None
        target = record["target"]
        print(
            f"switching to {target['provider']}/{target['model']} ({target['dim']} dimensions, {record['column']}): "
            "the serving process re-embeds every memory in the background and answers from the current "
            "vectors until the cut-over; `recalld embeddings status` shows the progress",
            file=sys.stderr,
        )

    async def abort(conn: asyncpg.Connection) -> None:
        try:
            record = await switching.abort_switch(conn)
        except switching.SwitchError as exc:
            raise CliError(str(exc)) from None
        source = record["source"]
        print(
            f"switch aborted: the stored vectors stay of {source['provider']}/{source['model']} "
            f"({source['dim']} dimensions)",
            file=sys.stderr,
        )

    work = {"status": status, "switch": switch, "abort": abort}[args.embeddings_command]
    asyncio.run(with_connection(settings, work))
    return 0
