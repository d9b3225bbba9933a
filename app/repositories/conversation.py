"""SQL for conversations: the turns around an episode in its session, and their re-indexing."""

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

    Session order is created_at, then id: ids are time-ordered (app.ids), so turns sharing a
    created_at follow their write order (R-S17). Each side is one range scan of
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


@dataclass(frozen=True, slots=True)
class TurnKey:
    """Where a turn sits: its conversation (agent and session) and its place in session order."""

    butler: str
    session_id: str
    created_at: datetime
    id: uuid.UUID


async def turns_before(
    conn: asyncpg.Connection, *, tenant_id: str, keys: Sequence[TurnKey], count: int
) -> dict[uuid.UUID, list[tuple[TurnKey, str]]]:
    """Up to `count` stored turns before each key in its session, newest first, with their content."""
    if not keys or count <= 0:
        return {}
    rows = await conn.fetch(
        """
        SELECT k.id AS key_id, t.id, t.created_at, t.content
        FROM unnest($2::text[], $3::text[], $4::timestamptz[], $5::uuid[]) AS k(butler, session_id, created_at, id)
        CROSS JOIN LATERAL (
            SELECT m.id, m.created_at, m.content FROM memory m
            WHERE m.tenant_id = $1 AND m.kind = 'episode' AND m.session_id = k.session_id
              AND m.butler = k.butler AND (m.created_at, m.id) < (k.created_at, k.id)
            ORDER BY m.created_at DESC, m.id DESC
            LIMIT $6
        ) t
        ORDER BY k.id, t.created_at DESC, t.id DESC
        """,
        uuid.UUID(tenant_id),
        [k.butler for k in keys],
        [k.session_id for k in keys],
        [k.created_at for k in keys],
        [k.id for k in keys],
        count,
    )
    by_id = {k.id: k for k in keys}
    out: dict[uuid.UUID, list[tuple[TurnKey, str]]] = {k.id: [] for k in keys}
    for r in rows:
        key = by_id[r["key_id"]]
        out[key.id].append((TurnKey(key.butler, key.session_id, r["created_at"], r["id"]), r["content"]))
    return out


async def turns_after(
    conn: asyncpg.Connection, *, tenant_id: str, keys: Sequence[TurnKey], count: int
) -> list[tuple[TurnKey, str, list[str]]]:
    """Up to `count` stored turns after each key in its session (deduplicated): key, content, tags."""
    if not keys or count <= 0:
        return []
    rows = await conn.fetch(
        """
        SELECT DISTINCT k.butler, k.session_id, t.id, t.created_at, t.content, t.tags
        FROM unnest($2::text[], $3::text[], $4::timestamptz[], $5::uuid[]) AS k(butler, session_id, created_at, id)
        CROSS JOIN LATERAL (
            SELECT m.id, m.created_at, m.content, m.tags FROM memory m
            WHERE m.tenant_id = $1 AND m.kind = 'episode' AND m.session_id = k.session_id
              AND m.butler = k.butler AND (m.created_at, m.id) > (k.created_at, k.id)
            ORDER BY m.created_at, m.id
            LIMIT $6
        ) t
        ORDER BY t.id
        """,
        uuid.UUID(tenant_id),
        [k.butler for k in keys],
        [k.session_id for k in keys],
        [k.created_at for k in keys],
        [k.id for k in keys],
        count,
    )
    return [
        (TurnKey(r["butler"], r["session_id"], r["created_at"], r["id"]), r["content"], list(r["tags"]))
        for r in rows
    ]


async def update_representations(
    conn: asyncpg.Connection, *, tenant_id: str, rows: Sequence[tuple[uuid.UUID, str]]
) -> None:
    """Replace the keyword text of episodes whose previous turn changed."""
    if rows:
        await conn.executemany(
            "UPDATE memory SET search_text = $3 WHERE tenant_id = $1 AND id = $2",
            [(uuid.UUID(tenant_id), memory_id, text) for memory_id, text in rows],
        )
