"""What every `recalld` subcommand shares: the error type, the database, the API key."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from app.infra.config import Settings
from app.infra.db import connect, resolve_dsn
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


_DURATION = re.compile(r"(\d+)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def duration(text: str) -> timedelta:
    """argparse type: 90s, 15m, 24h, 30d or 2w."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"expected a duration like 90s, 15m, 24h, 30d or 2w, got {text!r}")
    return timedelta(**{_UNITS[match[2]]: int(match[1])})


def timestamp(text: str) -> datetime:
    """argparse type: an ISO 8601 date or time; without an offset it is UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 time like 2027-01-31T12:00Z, got {text!r}"
        ) from exc
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def expiry(args: argparse.Namespace) -> datetime | None:
    """The key expiry asked for with --expires-in or --expires-at, if any."""
    if args.expires_in is not None:
        lifetime: timedelta = args.expires_in
        return datetime.now(UTC) + lifetime
    value: datetime | None = args.expires_at
    return value


def when(value: datetime | None) -> str:
    """A time for the admin listings: UTC to the second, '-' when absent."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else "-"
