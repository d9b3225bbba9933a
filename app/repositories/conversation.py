"""SQL for conversation context: the turns around an episode in its session."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg


@dataclass(frozen=True, slots=True)
class NeighbourTurn:
    """A turn near a hit: `offset` turns before (< 0) or after (> 0) it in session order."""

    hit_id: uuid.UUID
    id: uuid.UUID
    content: str
    metadata: dict[str, Any]
    created_at: datetime
    offset: int


async def neighbour_turns(
    conn: asyncpg.Connection, *, tenant_ids: Sequence[str], hit_ids: Sequence[uuid.UUID], window: int
) -> list[NeighbourTurn]:
    """Up to `window` live turns before and after each episode hit, same tenant, session and butler.

    Session order is created_at, then id. Each side is one range scan of
    memory_episode_session_idx bounded by LIMIT, whatever the session's length.
    """
    if not hit_ids or window <= 0:
        return []
    rows = await conn.fetch(
        """
        WITH hit AS (
            SELECT tenant_id, id, session_id, butler, created_at FROM memory
            WHERE tenant_id = ANY($1::uuid[]) AND id = ANY($2::uuid[])
              AND kind = 'episode' AND session_id IS NOT NULL
        )
        SELECT h.id AS hit_id, t.id, t.content, t.metadata, t.created_at, -t.n AS turn_offset
        FROM hit h CROSS JOIN LATERAL (
            SELECT m.id, m.content, m.metadata, m.created_at,
                   row_number() OVER (ORDER BY m.created_at DESC, m.id DESC) AS n
            FROM memory m
            WHERE m.tenant_id = h.tenant_id AND m.kind = 'episode' AND m.session_id = h.session_id
              AND m.butler = h.butler AND m.expires_at > now()
              AND (m.created_at, m.id) < (h.created_at, h.id)
            ORDER BY m.created_at DESC, m.id DESC
            LIMIT $3
        ) t
        UNION ALL
        SELECT h.id, t.id, t.content, t.metadata, t.created_at, t.n
        FROM hit h CROSS JOIN LATERAL (
            SELECT m.id, m.content, m.metadata, m.created_at,
                   row_number() OVER (ORDER BY m.created_at, m.id) AS n
            FROM memory m
            WHERE m.tenant_id = h.tenant_id AND m.kind = 'episode' AND m.session_id = h.session_id
              AND m.butler = h.butler AND m.expires_at > now()
              AND (m.created_at, m.id) > (h.created_at, h.id)
            ORDER BY m.created_at, m.id
            LIMIT $3
        ) t
        ORDER BY hit_id, turn_offset
        """,
        [uuid.UUID(t) for t in tenant_ids],
        list(hit_ids),
        window,
    )
    return [
        NeighbourTurn(r["hit_id"], r["id"], r["content"], r["metadata"], r["created_at"], r["turn_offset"])
        for r in rows
    ]
