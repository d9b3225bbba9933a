"""Alembic from inside recalld: upgrade to head, and check that a database is at head."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _alembic_config(dsn: str | None = None) -> Config:
    config = Config(str(PROJECT_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(PROJECT_ROOT / "migrations"))
    if dsn is not None:
        parts = urlsplit(dsn)
        url = urlunsplit(("postgresql+asyncpg", parts.netloc, parts.path, parts.query, parts.fragment))
        # ConfigParser interpolation treats % specially.
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def head_revision() -> str:
    """The newest revision shipped with this code."""
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    assert head is not None
    return head


def upgrade_to_head(dsn: str) -> None:
    """Apply every pending migration (blocking; call from a thread inside an event loop)."""
    command.upgrade(_alembic_config(dsn), "head")


def downgrade_to(dsn: str, revision: str) -> None:
    """Undo migrations down to revision ("base": all of them); blocking, like upgrade_to_head."""
    command.downgrade(_alembic_config(dsn), revision)


async def current_revision(conn: asyncpg.Connection) -> str | None:
    """Revision the database is at, or None before the first migration."""
    exists = await conn.fetchval("SELECT to_regclass('public.alembic_version') IS NOT NULL")
    if not exists:
        return None
    revision: str | None = await conn.fetchval("SELECT version_num FROM alembic_version")
    return revision
