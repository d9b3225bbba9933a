"""SQL behind a write's truth rules: duplicates, near-duplicates, supersession and the write locks."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg
from pgvector import Vector as PgVector

from app.embeddings.base import Vector
from app.repositories.memories import MEMORY_COLUMNS


async def existing_ids_of_kinds(
    conn: asyncpg.Connection, *, tenant_id: str, ids: Sequence[uuid.UUID], kinds: Sequence[str]
) -> set[uuid.UUID]:
    """Which of ids exist in the tenant with one of the kinds."""
    rows = await conn.fetch(
        "SELECT id FROM memory WHERE tenant_id = $1 AND id = ANY($2::uuid[]) AND kind = ANY($3::text[])",
        uuid.UUID(tenant_id),
        list(ids),
        list(kinds),
    )
    return {r["id"] for r in rows}


@dataclass(frozen=True, slots=True)
class Supersession:
    """An older fact or rule replaced by a newer one, which starts being true at `since`."""

    old: uuid.UUID
    new: uuid.UUID
    since: datetime


async def mark_superseded(
    conn: asyncpg.Connection, *, tenant_id: str, changes: Sequence[Supersession]
) -> None:
    """Mark facts/rules superseded; the first successor ends their valid time and becomes their link."""
    await conn.execute(
        "UPDATE memory m SET validity = 'superseded', "
        "valid_to = coalesce(m.valid_to, greatest(m.valid_from, c.since)), "
        "superseded_by = coalesce(m.superseded_by, c.new) "
        "FROM unnest($2::uuid[], $3::uuid[], $4::timestamptz[]) AS c(old, new, since) "
        "WHERE m.tenant_id = $1 AND m.id = c.old AND m.kind IN ('fact', 'rule')",
        uuid.UUID(tenant_id),
        [c.old for c in changes],
        [c.new for c in changes],
        [c.since for c in changes],
    )


async def lock_write_keys(conn: asyncpg.Connection, *, keys: Sequence[int]) -> None:
    """Take transaction advisory locks on keys, in ascending order (so two writers cannot deadlock)."""
    if keys:
        await conn.execute(
            "SELECT count(pg_advisory_xact_lock(k)) FROM (SELECT DISTINCT k FROM unnest($1::bigint[]) k ORDER BY k) s",
            sorted(keys),
        )


async def active_with_content_keys(
    conn: asyncpg.Connection, *, tenant_id: str, keys: Sequence[bytes]
) -> list[asyncpg.Record]:
    """Active facts and rules, and unexpired episodes, whose normalised content has one of keys."""
    if not keys:
        return []
    rows: list[asyncpg.Record] = await conn.fetch(
        "SELECT id, kind, scope, subject, butler, session_id, content_key, created_at FROM memory "
        "WHERE tenant_id = $1 AND content_key = ANY($2::bytea[]) "
        "AND (validity = 'active' OR (kind = 'episode' AND expires_at > now())) "
        "ORDER BY created_at, id",
        uuid.UUID(tenant_id),
        list(keys),
    )
    return rows


@dataclass(frozen=True, slots=True)
class PredicateSlot:
    """Where a single-valued fact lives: its subject, predicate and scope."""

    subject: str
    predicate: str
    scope: str


async def lock_active_facts_in_slots(
    conn: asyncpg.Connection, *, tenant_id: str, slots: Sequence[PredicateSlot]
) -> list[asyncpg.Record]:
    """Active facts with one of these subject/predicate/scope triples, locked, oldest first."""
    if not slots:
        return []
    rows: list[asyncpg.Record] = await conn.fetch(
        "SELECT m.id, m.subject, m.predicate, m.scope FROM memory m "
        "JOIN unnest($2::text[], $3::text[], $4::text[]) AS s(subject, predicate, scope) "
        "ON m.subject = s.subject AND m.predicate = s.predicate AND m.scope = s.scope "
        "WHERE m.tenant_id = $1 AND m.kind = 'fact' AND m.validity = 'active' AND m.predicate IS NOT NULL "
        "ORDER BY m.created_at, m.id FOR UPDATE OF m",
        uuid.UUID(tenant_id),
        [s.subject for s in slots],
        [s.predicate for s in slots],
        [s.scope for s in slots],
    )
    return rows


@dataclass(frozen=True, slots=True)
class NearProbe:
    """A memory about to be written, looking for active ones close to it in its own group."""

    position: int
    kind: str
    scope: str
    subject: str | None
    butler: str | None
    embedding: Vector


# How many of a group's newest active memories a written one is compared with: repeats are recent.
NEAR_CANDIDATES = 32


async def near_neighbours(
    conn: asyncpg.Connection,
    *,
    tenant_id: str,
    probes: Sequence[NearProbe],
    floor: float,
    before: datetime,
) -> list[asyncpg.Record]:
    """Per probe, the newest active memories of its kind, scope and subject/butler stored before `before`, at cosine ≥ floor."""
    if not probes:
        return []
    rows: list[asyncpg.Record] = await conn.fetch(
        "SELECT p.n, c.id, c.content, c.similarity "
        "FROM unnest($2::int[], $3::text[], $4::text[], $5::text[], $6::text[], $7::vector[]) "
        "AS p(n, kind, scope, subject, butler, embedding) "
        # The group's newest rows through memory_tenant_near_group_idx (0021), in its order, and only
        # those rows' vectors, each by its key. Joined instead, the planner read every row of the kind
        # and every one's vector, then sorted: 14 s for 64 probes at 9,000 facts (docs). A fact has
        # no butler and an episode no subject; turns of a session are never duplicates (positional),
        # so that index leaves them out.
        "CROSS JOIN LATERAL (SELECT m.id, m.content, 1 - (SELECT v.embedding <=> p.embedding "
        "FROM memory_vector v WHERE v.tenant_id = m.tenant_id AND v.memory_id = m.id) AS similarity "
        "FROM memory m WHERE m.tenant_id = $1 AND m.kind = p.kind AND m.scope = p.scope "
        "AND coalesce(m.subject, m.butler, '') = coalesce(p.subject, p.butler, '') "
        "AND m.content_key IS NOT NULL AND (m.kind <> 'episode' OR m.session_id IS NULL) "
        "AND (m.validity = 'active' OR (m.kind = 'episode' AND m.expires_at > now())) "
        # Not the rows this transaction wrote (a batch's earlier chunks): they are the write's own.
        # Those stored at the write's time are skipped inside the index (created_at < before), the
        # ones a client dated earlier by their transaction id.
        "AND m.created_at < $9 AND NOT m.xmin = (pg_current_xact_id()::text::bigint % 4294967296)::text::xid "
        f"ORDER BY m.created_at DESC LIMIT {NEAR_CANDIDATES}) c "
        "WHERE c.similarity >= $8 ORDER BY p.n, c.similarity DESC, c.id",
        uuid.UUID(tenant_id),
        [p.position for p in probes],
        [p.kind for p in probes],
        [p.scope for p in probes],
        [p.subject for p in probes],
        [p.butler for p in probes],
        # Wrapped: an array of bare numpy vectors would be encoded as one two-dimensional array. Sent
        # as vector[] whatever the column's type: against a halfvec(n) column (models past 2,000
        # dimensions) pgvector's implicit vector -> halfvec cast compares them at the stored precision.
        [PgVector(p.embedding) for p in probes],
        floor,
        before,
    )
    return rows


async def supersession_chain(
    conn: asyncpg.Connection, *, tenant_id: str, id: uuid.UUID
) -> list[asyncpg.Record]:
    """Every memory linked to id by supersession, either way, newest first; empty when id is missing."""
    rows: list[asyncpg.Record] = await conn.fetch(
        "WITH RECURSIVE chain(id, superseded_by) AS ("
        "  SELECT id, superseded_by FROM memory WHERE tenant_id = $1 AND id = $2"
        "  UNION"
        "  SELECT m.id, m.superseded_by FROM memory m JOIN chain c "
        "  ON m.tenant_id = $1 AND (m.superseded_by = c.id OR m.id = c.superseded_by)"
        f") SELECT {MEMORY_COLUMNS} FROM memory WHERE tenant_id = $1 AND id IN (SELECT id FROM chain) "
        # Newest first; a successor's valid_from is its predecessor's valid_to, so the open end leads,
        # and rows of one batch (same times) fall back on their time-ordered ids.
        "ORDER BY valid_to DESC NULLS FIRST, coalesce(valid_from, created_at) DESC, created_at DESC, id DESC",
        uuid.UUID(tenant_id),
        id,
    )
    return rows
