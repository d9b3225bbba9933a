"""Alembic environment: runs the hand-written revisions over asyncpg."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import pool
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

config = context.config


# Any constant shared by every recalld process: two processes starting at once migrate in turn.
MIGRATION_LOCK_ID = 72_410_001


def _run(connection: Connection) -> None:
    connection.exec_driver_sql(f"SELECT pg_advisory_lock({MIGRATION_LOCK_ID})")
    connection.commit()
    context.configure(connection=connection, target_metadata=None, transaction_per_migration=True)
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    url = config.get_main_option("sqlalchemy.url")
    assert url, "recalld sets sqlalchemy.url before running migrations"
    engine = create_async_engine(url, poolclass=pool.NullPool)
    async with engine.connect() as connection:
        await connection.run_sync(_run)
    await engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline SQL generation is not supported; run `recalld migrate`")
asyncio.run(_run_async())
