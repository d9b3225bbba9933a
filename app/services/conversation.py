"""Conversations: episode hits' neighbouring turns, and episodes keyword-indexed with the turn before them."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from app.infra.db import Database
from app.repositories.conversation import (
    TurnKey,
    neighbour_turns,
    turns_after,
    turns_before,
    update_representations,
)
from app.repositories.memories import NewMemory
from app.retrieval.conversation import PREVIOUS_TURNS, episode_representation
from app.retrieval.query import search_text_for


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


def _key(row: NewMemory) -> TurnKey | None:
    if row.kind != "episode" or row.session_id is None or row.butler is None:
        return None
    return TurnKey(row.butler, row.session_id, row.created_at, row.id)


def _order(key: TurnKey) -> tuple[datetime, int]:
    # Session order, as PostgreSQL sorts (created_at, id): uuid compares as its 128-bit number.
    return (key.created_at, key.id.int)


async def representations(db: Database, *, tenant_id: str, rows: Sequence[NewMemory]) -> dict[uuid.UUID, str]:
    """The text to index for each new episode of a session: its previous turn(s), stored or in this batch, then itself."""
    keys = [k for k in map(_key, rows) if k is not None]
    if not keys or PREVIOUS_TURNS == 0:
        return {}
    async with db.transaction([tenant_id], readonly=True) as conn:
        stored = await turns_before(conn, tenant_id=tenant_id, keys=keys, count=PREVIOUS_TURNS)
    content = {r.id: r.content for r in rows}
    sessions: dict[tuple[str, str], list[TurnKey]] = {}
    for key in keys:
        sessions.setdefault((key.butler, key.session_id), []).append(key)
    out: dict[uuid.UUID, str] = {}
    for batch in sessions.values():
        batch.sort(key=_order)
        for position, key in enumerate(batch):
            earlier = [(k, content[k.id]) for k in batch[max(0, position - PREVIOUS_TURNS) : position]]
            candidates = sorted([*stored[key.id], *earlier], key=lambda pair: _order(pair[0]))
            out[key.id] = episode_representation([text for _, text in candidates], content[key.id])
    return out


async def reindex_followers(
    conn: asyncpg.Connection, *, tenant_id: str, keys: Sequence[TurnKey], written: Collection[uuid.UUID] = ()
) -> int:
    """Re-index the keyword text of the stored turns that now follow a written or deleted turn; returns how many.

    Runs in the transaction of the write or delete that moved the turns: done after its commit, a
    failure here answered an error for a change that was already stored.
    """
    if not keys or PREVIOUS_TURNS == 0:
        return 0
    followers = [
        f
        for f in await turns_after(conn, tenant_id=tenant_id, keys=keys, count=PREVIOUS_TURNS)
        if f[0].id not in written
    ]
    if not followers:
        return 0
    before = await turns_before(
        conn, tenant_id=tenant_id, keys=[key for key, _, _ in followers], count=PREVIOUS_TURNS
    )
    await update_representations(
        conn,
        tenant_id=tenant_id,
        rows=[
            (
                key.id,
                search_text_for(
                    episode_representation([text for _, text in reversed(before[key.id])], content), tags
                ),
            )
            for key, content, tags in followers
        ],
    )
    return len(followers)


def turn_keys(rows: Sequence[NewMemory]) -> list[TurnKey]:
    """The conversation keys of the episodes among rows."""
    return [k for k in map(_key, rows) if k is not None]
