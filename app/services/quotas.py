"""Per-tenant quotas on what is stored: memory rows and bytes."""

from __future__ import annotations

import asyncpg

from app.errors import ApiError
from app.infra.config import Quota
from app.repositories import memories as repo


async def ensure_within_quota(conn: asyncpg.Connection, *, tenant_id: str, quota: Quota | None) -> None:
    """413 (and the write rolls back) when the open transaction left the tenant over its quota.

    Called after the write's inserts: the usage row they updated stays locked until commit, so
    concurrent writers of one tenant are checked one after another and none slips past the limit.
    """
    if quota is None:
        return
    usage = await repo.tenant_usage(conn, tenant_id=tenant_id)
    if usage.memories > quota.max_memories:
        raise ApiError(
            413,
            "quota_exceeded",
            f"this write would bring the tenant to {usage.memories:,} memories, over its quota of "
            f"{quota.max_memories:,}; delete memories or ask the operator to raise it",
            {"memories": usage.memories, "max_memories": quota.max_memories},
        )
    if usage.bytes > quota.max_bytes:
        raise ApiError(
            413,
            "quota_exceeded",
            f"this write would bring the tenant to {usage.bytes:,} bytes of content and metadata, over "
            f"its quota of {quota.max_bytes:,}; delete memories or ask the operator to raise it",
            {"bytes": usage.bytes, "max_bytes": quota.max_bytes},
        )
