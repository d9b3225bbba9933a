"""`recalld backup DIR` and `recalld restore DIR`: the embedded database, copied while it serves."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import asyncpg

from app.cli.common import CliError, with_connection
from app.infra.backup import BackupError, backup, restore
from app.infra.config import Settings
from app.repositories.transfer import schema_revision
from app.services import tenants as tenant_service

_EXTERNAL = (
    "backup and restore copy the embedded database; with DATABASE_URL use pg_dump / pg_restore "
    "as README.md ('Operating recalld') describes"
)


def cmd_backup(args: argparse.Namespace, settings: Settings) -> int:
    if settings.database_url:
        raise CliError(_EXTERNAL)
    target = Path(args.directory)
    try:
        manifest = backup(settings.resolved_data_dir, target)
    except BackupError as exc:
        raise CliError(str(exc)) from exc
    print(
        f"backed up {settings.resolved_data_dir} to {target} (PostgreSQL {manifest['postgresql']}, verified)"
    )
    return 0


def cmd_restore(args: argparse.Namespace, settings: Settings) -> int:
    if settings.database_url:
        raise CliError(_EXTERNAL)
    data_dir = settings.resolved_data_dir
    try:
        manifest = restore(Path(args.directory), data_dir)
    except BackupError as exc:
        raise CliError(str(exc)) from exc

    async def read(conn: asyncpg.Connection) -> tuple[str | None, int]:
        return await schema_revision(conn), len(await tenant_service.list_tenants(conn))

    # Starting the copy replays the WAL streamed during the backup (and migrates an older schema).
    revision, tenants = asyncio.run(with_connection(settings, read))
    print(
        f"restored the backup of {manifest['created_at']} into {data_dir}: schema {revision}, {tenants} tenants; "
        "start it with `recalld serve`",
        file=sys.stderr,
    )
    return 0
