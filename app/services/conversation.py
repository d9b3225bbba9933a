"""Conversation context: the neighbouring turns of episode hits, outside the result count."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg

from app.repositories.conversation import neighbour_turns


async def context_by_hit(
    conn: asyncpg.Connection, *, tenant_ids: Sequence[str], episode_ids: Sequence[uuid.UUID], window: int
) -> dict[uuid.UUID, list[dict[str, Any]]]:
    """Each episode hit's turns within `window` of it in its session, oldest first (tenant-bounded)."""
    turns = await neighbour_turns(conn, tenant_ids=tenant_ids, hit_ids=episode_ids, window=window)
    out: dict[uuid.UUID, list[dict[str, Any]]] = {hit: [] for hit in episode_ids}
    for t in turns:
        out[t.hit_id].append(
            {
                "id": t.id,
                "content": t.content,
                "metadata": t.metadata,
                "created_at": t.created_at,
                "offset": t.offset,
            }
        )
    return out
