"""What every `recalld` subcommand shares: the error type, the database, the API key."""

from __future__ import annotations

import argparse
import os
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from app.config import Settings
from app.db import connect, resolve_dsn
from app.startup import ensure_schema


class CliError(Exception):
    """A failure to report on stderr with exit code 1 (no traceback)."""


async def prepare_database(settings: Settings, *, migrate: bool | None = None) -> str:
    """Resolve the database, bring the schema to head when allowed; returns the DSN."""
    dsn = await resolve_dsn(settings)
    await ensure_schema(dsn, migrate=settings.database_url is None if migrate is None else migrate)
    return dsn


async def with_connection(settings: Settings, work: Callable[[asyncpg.Connection], Awaitable[Any]]) -> Any:
    dsn = await prepare_database(settings)
    conn = await connect(dsn)
    try:
        return await work(conn)
    finally:
        await conn.close()


def api_key(args: argparse.Namespace, settings: Settings) -> str:
    key = args.key or os.environ.get("RECALLD_API_KEY")
    if key:
        return str(key)
    if settings.admin_key_path.exists():
        return settings.admin_key_path.read_text().strip()
    raise CliError("no API key: pass --key, set RECALLD_API_KEY, or run `recalld serve` once to create one")
