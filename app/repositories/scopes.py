"""SQL for per-scope retrieval settings."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg


async def get_scope_settings(
    conn: asyncpg.Connection, *, tenant_id: str, scope: str
) -> dict[str, Any] | None:
    """Stored settings of one scope, if any."""
    value: dict[str, Any] | None = await conn.fetchval(
        "SELECT settings FROM scope_settings WHERE tenant_id = $1 AND scope = $2", uuid.UUID(tenant_id), scope
    )
    return value


async def put_scope_settings(
    conn: asyncpg.Connection, *, tenant_id: str, scope: str, settings: dict[str, Any]
) -> None:
    """Create or replace one scope's settings."""
    await conn.execute(
        "INSERT INTO scope_settings (tenant_id, scope, settings) VALUES ($1, $2, $3::jsonb) "
        "ON CONFLICT (tenant_id, scope) DO UPDATE SET settings = EXCLUDED.settings, updated_at = clock_timestamp()",
        uuid.UUID(tenant_id),
        scope,
        settings,
    )
