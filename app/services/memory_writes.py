"""Writing memories: one all-or-nothing tenant transaction per request, embedded batch by batch."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from app.auth import Principal
from app.embeddings.base import Embedder
from app.errors import ApiError
from app.ids import time_ordered_uuid
from app.infra.config import Quota
from app.infra.db import Database
from app.repositories import memories as repo
from app.repositories import memory_truth as truth_repo
from app.retrieval.duplicates import NEAR_SIMILARITY, content_key, is_near_duplicate, word_overlap
from app.retrieval.language import dominant_script
from app.retrieval.query import search_text_for
from app.services import conversation
from app.services.memories import memory_to_dict
from app.services.memory_truth import (
    Identity,
    Truth,
    chain_within_request,
    check_drafts,
    ensure_same_writes,
    identity_of,
    lock_key,
    predicate_slot,
    row_identity,
    write_fingerprint,
)
from app.services.quotas import ensure_within_quota
from app.services.requests import MemoryDraft
from app.services.scopes import load_scope_settings

EPISODE_TTL = timedelta(days=7)
# At most this many near-duplicates are listed per written memory (the closest first).
MAX_SIMILAR = 5


def _new_row(item: MemoryDraft, now: datetime) -> repo.NewMemory:
    created = item.created_at or now
    row = repo.NewMemory(
        # Time-ordered: turns sharing a created_at keep their write order in a session (R-S17).
        id=time_ordered_uuid(),
        kind=item.kind,
        content=item.content,
        search_text=search_text_for(item.content, item.tags),
        script=dominant_script(item.content),
        created_at=created,
        importance=item.importance,
        scope=item.scope,
        tags=item.tags,
        metadata=item.metadata,
        idempotency_key=item.idempotency_key,
        idempotency_fingerprint=write_fingerprint(item) if item.idempotency_key else None,
        content_key=content_key(item.content),
    )
    if item.kind in ("fact", "rule"):
        row.confidence = item.confidence
        row.decay_rate = item.decay_rate
        row.last_confirmed_at = item.last_confirmed_at or created
        row.validity = "active"
        row.supersedes = item.supersedes
        row.valid_from = item.valid_from or created
        row.valid_to = item.valid_to
    if item.kind == "fact":
        row.subject = item.subject
        row.predicate = item.predicate
    if item.kind == "episode":
        row.butler = item.butler
        row.session_id = item.session_id
        row.expires_at = item.expires_at or now + EPISODE_TTL
    return row


async def write_memories(
    db: Database,
    embedder: Embedder | None,
    principal: Principal,
    items: Sequence[MemoryDraft],
    *,
    quota: Quota | None = None,
) -> list[dict[str, Any]]:
    """Store items all-or-nothing; duplicates answer the memory they repeat, supersession is applied.

    A retried idempotency key with the same body returns the first memory. Each answer says what
    happened: `duplicate_of`, `superseded`, `similar_to`.
    """
    tenant_id = principal.tenant_id
    now = datetime.now(UTC)
    check_drafts(items)
    keys = [i.idempotency_key for i in items if i.idempotency_key]
    if len(set(keys)) != len(keys):
        raise ApiError(422, "validation_error", "idempotency_key values must be unique within one request")
    async with db.transaction([tenant_id]) as conn:
        existing = await repo.find_by_idempotency_keys(conn, tenant_id=tenant_id, keys=keys)
        settings = {
            scope: await load_scope_settings(conn, tenant_id=tenant_id, scope=scope)
            for scope in sorted({i.scope for i in items})
        }
    ensure_same_writes(items, existing)
    # Per item: a new row to insert, or None when its idempotency key was written before or an
    # earlier item of this request says the same thing (same_as: that item's position).
    plan: list[repo.NewMemory | None] = []
    same_as: dict[int, int] = {}
    seen: dict[Identity, int] = {}
    for n, item in enumerate(items):
        if item.idempotency_key and item.idempotency_key in existing:
            plan.append(None)
            continue
        row = _new_row(item, now)
        identity = row_identity(row)
        if identity is not None and identity in seen:
            same_as[n] = seen[identity]
            plan.append(None)
            continue
        if identity is not None:
            seen[identity] = n
        plan.append(row)
    rows = [r for r in plan if r is not None]
    drafts = {r.id: i for r, i in zip(plan, items, strict=True) if r is not None}
    truth = Truth()
    slotted = [
        (r, slot)
        for r, i in zip(plan, items, strict=True)
        if r is not None and (slot := predicate_slot(r, i, settings))
    ]
    first_in_slot = chain_within_request(slotted, truth)
    # Episodes of a session are keyword-indexed with the turn before them, embedded alone
    # (app.retrieval.conversation).
    indexed = await conversation.representations(db, tenant_id=tenant_id, rows=rows)
    for row in rows:
        if row.id in indexed:
            row.search_text = search_text_for(indexed[row.id], row.tags)
    texts = [r.content for r in rows]
    batches = embedder.start_documents(texts) if embedder and rows else []
    lock_keys = [lock_key(tenant_id, "same", i) for r in rows if (i := row_identity(r)) is not None]
    lock_keys += [lock_key(tenant_id, "slot", s.subject, s.predicate, s.scope) for s in first_in_slot]

    async def find_similar(conn: asyncpg.Connection, chunk: Sequence[repo.NewMemory]) -> None:
        """Report active near-duplicates of each row; merge into the closest where the scope asks."""
        probes = [
            truth_repo.NearProbe(n, r.kind, r.scope, r.subject, r.butler, r.embedding)
            for n, r in enumerate(chunk)
            if r.embedding is not None and r.id not in truth.duplicate_of and row_identity(r) is not None
        ]
        found = await truth_repo.near_neighbours(
            conn, tenant_id=tenant_id, probes=probes, floor=NEAR_SIMILARITY, before=now
        )
        for near in found:
            row = chunk[near["n"]]
            overlap = word_overlap(row.content, near["content"])
            listed = truth.similar.setdefault(row.id, [])
            if is_near_duplicate(near["similarity"], overlap) and len(listed) < MAX_SIMILAR:
                listed.append(
                    {
                        "id": near["id"],
                        "similarity": round(near["similarity"], 4),
                        "word_overlap": round(overlap, 4),
                    }
                )
        for row in chunk:
            # A row that replaces other facts is stored whatever it resembles: its supersession stands.
            plain = row.supersedes is None and row.superseded_by is None and row.id not in truth.superseded
            if truth.similar.get(row.id) and plain and settings[row.scope].merge_near_duplicates:
                truth.duplicate_of[row.id] = truth.similar[row.id][0]["id"]

    async def insert(conn: asyncpg.Connection) -> None:
        if not batches:
            await repo.insert_memories(
                conn, tenant_id=tenant_id, rows=[r for r in rows if r.id not in truth.duplicate_of]
            )
        # Each batch is written while the next one is embedded: PostgreSQL's work (HNSW insertion,
        # postings) overlaps the model's instead of following it. The transaction stays open meanwhile,
        # holding the tenant's usage row, which only this tenant's other writes wait for.
        for batch in batches:
            chunk = [rows[i] for i in batch.positions]
            for row, vector in zip(chunk, await batch.vectors, strict=True):
                row.embedding = vector
            await find_similar(conn, chunk)
            await repo.insert_memories(
                conn, tenant_id=tenant_id, rows=[r for r in chunk if r.id not in truth.duplicate_of]
            )
        merged = set(truth.duplicate_of.values()) - truth.confirmed.keys()
        if merged:
            truth.confirmed.update(await repo.confirm_memories(conn, tenant_id=tenant_id, ids=sorted(merged)))

    async def answer_duplicates(conn: asyncpg.Connection) -> None:
        """Rows repeating an active memory are not stored: that memory answers, confirmed."""
        by_identity: dict[Identity, uuid.UUID] = {}
        for found in await truth_repo.active_with_content_keys(
            conn, tenant_id=tenant_id, keys=sorted({r.content_key for r in rows if r.content_key is not None})
        ):
            identity = identity_of(
                found["kind"],
                found["scope"],
                found["subject"],
                found["butler"],
                found["session_id"],
                bytes(found["content_key"]),
            )
            if identity is not None:
                by_identity.setdefault(identity, found["id"])  # the oldest one: rows come oldest first
        for row in rows:
            target = by_identity.get(row_identity(row) or ("", "", None, None, b""))
            if target is not None:
                truth.duplicate_of[row.id] = target
        truth.confirmed = await repo.confirm_memories(
            conn, tenant_id=tenant_id, ids=sorted(set(truth.duplicate_of.values()))
        )

    async def supersede(conn: asyncpg.Connection) -> None:
        """Mark what the new facts and rules replace, by id and by subject and predicate."""
        explicit = [r for r in rows if drafts[r.id].supersedes is not None and r.id not in truth.duplicate_of]
        named = [r.supersedes for r in explicit if r.supersedes is not None]
        if named:
            found = await truth_repo.existing_ids_of_kinds(
                conn, tenant_id=tenant_id, ids=named, kinds=("fact", "rule")
            )
            missing = [str(s) for s in named if s not in found]
            if missing:
                raise ApiError(
                    422, "validation_error", f"supersedes: no fact or rule {missing[0]}", {"missing": missing}
                )
        changes = [
            truth_repo.Supersession(r.supersedes, r.id, r.valid_from or r.created_at)
            for r in explicit
            if r.supersedes is not None
        ]
        slots = {s: r for s, r in first_in_slot.items() if r.id not in truth.duplicate_of}
        for old in await truth_repo.lock_active_facts_in_slots(conn, tenant_id=tenant_id, slots=list(slots)):
            new = slots[truth_repo.PredicateSlot(old["subject"], old["predicate"], old["scope"])]
            changes.append(truth_repo.Supersession(old["id"], new.id, new.valid_from or new.created_at))
            # Oldest first: the newest one replaced is what `supersedes` names (unless the write named one).
            new.supersedes = drafts[new.id].supersedes or old["id"]
        for change in changes:
            listed = truth.superseded.setdefault(change.new, [])
            if change.old not in listed:
                listed.append(change.old)
        # Superseded rows are locked before the insert takes the tenant's usage row (trigger), the
        # order a concurrent forget of one of them (row, then usage) also follows: no deadlock.
        if changes:
            await truth_repo.mark_superseded(conn, tenant_id=tenant_id, changes=changes)

    async def store(conn: asyncpg.Connection) -> tuple[dict[uuid.UUID, Any], dict[str, Any]]:
        # Two writes of the same memory (or of one single-valued predicate) take turns from here on:
        # the second sees the first's row.
        await truth_repo.lock_write_keys(conn, keys=lock_keys)
        # From the drafts again: a try that was rolled back (deadlock, serialization) left its marks.
        truth.duplicate_of.clear()
        truth.superseded.clear()
        truth.similar.clear()
        for row in rows:
            draft = drafts[row.id]
            row.supersedes, row.valid_to, row.superseded_by = draft.supersedes, draft.valid_to, None
            row.validity = "active" if row.kind in ("fact", "rule") else None
        chain_within_request(slotted, truth)
        await answer_duplicates(conn)
        await supersede(conn)
        await insert(conn)
        written = [r for r in rows if r.id not in truth.duplicate_of]
        # A turn written into the middle of a session changes what the turn after it is indexed with.
        turns = conversation.turn_keys(written)
        await conversation.reindex_followers(
            conn, tenant_id=tenant_id, keys=turns, written={t.id for t in turns}
        )
        if written:
            await ensure_within_quota(conn, tenant_id=tenant_id, quota=quota)
        stored = await repo.fetch_memories(conn, tenant_ids=[tenant_id], ids=[r.id for r in written])
        # A concurrent retry may have won the race for an idempotency key: return its row.
        racing = [r.idempotency_key for r in written if r.id not in stored and r.idempotency_key]
        won = await repo.find_by_idempotency_keys(conn, tenant_id=tenant_id, keys=racing) if racing else {}
        return stored, won

    try:
        if embedder is not None:
            for row, next_vector in zip(rows, await embedder.switch_vectors(texts), strict=True):
                row.embedding_next = next_vector
        with embedder.overlap_slot() if embedder else nullcontext(False) as overlap:
            # No connection is held while the first batch (or, without a slot, every batch) embeds.
            for batch in batches if not overlap else batches[:1]:
                await batch.vectors
            stored, won = await db.run([tenant_id], store)
    finally:
        Embedder.cancel_documents(batches)
    existing.update(won)
    if won:
        ensure_same_writes(items, existing)
    out: list[dict[str, Any]] = []
    for n, (item, planned) in enumerate(zip(items, plan, strict=True)):
        if n in same_as:
            earlier = out[same_as[n]]
            out.append({**earlier, "duplicate_of": earlier["id"], "superseded": [], "similar_to": []})
            continue
        duplicate_of = truth.duplicate_of.get(planned.id) if planned is not None else None
        if duplicate_of is not None:
            record = truth.confirmed[duplicate_of]
        elif planned is not None and planned.id in stored:
            record = stored[planned.id]
        else:
            assert item.idempotency_key is not None
            record = existing[item.idempotency_key]
        answer = memory_to_dict(record, now)
        answer["duplicate_of"] = duplicate_of
        answer["superseded"] = (
            truth.superseded.get(planned.id, []) if planned is not None and not duplicate_of else []
        )
        answer["similar_to"] = truth.similar.get(planned.id, []) if planned is not None else []
        out.append(answer)
    return out
