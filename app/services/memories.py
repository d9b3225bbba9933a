"""Writing, reading, confirming and forgetting memories; each call is one tenant transaction."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from app.auth import Principal
from app.config import Quota
from app.db import Database
from app.embeddings.base import Embedder
from app.errors import ApiError, not_found
from app.ids import time_ordered_uuid
from app.repositories import chunks as chunk_repo
from app.repositories import code as code_repo
from app.repositories import documents as doc_repo
from app.repositories import memories as repo
from app.repositories.conversation import TurnKey
from app.retrieval.duplicates import NEAR_SIMILARITY, content_key, is_near_duplicate, word_overlap
from app.retrieval.language import dominant_script
from app.retrieval.query import search_text_for
from app.retrieval.scoring import effective_confidence
from app.services import conversation
from app.services.quotas import ensure_within_quota
from app.services.requests import MemoryDraft
from app.services.scopes import ScopeSettings, load_scope_settings

EPISODE_TTL = timedelta(days=7)
# At most this many near-duplicates are listed per written memory (the closest first).
MAX_SIMILAR = 5

_KIND_FIELDS: dict[str, tuple[str, ...]] = {
    "fact": (
        "subject",
        "predicate",
        "confidence",
        "decay_rate",
        "last_confirmed_at",
        "validity",
        "supersedes",
        "superseded_by",
        "valid_from",
        "valid_to",
        "effective_confidence",
    ),
    "rule": (
        "confidence",
        "decay_rate",
        "last_confirmed_at",
        "validity",
        "supersedes",
        "superseded_by",
        "valid_from",
        "valid_to",
        "effective_confidence",
    ),
    "episode": ("butler", "session_id", "expires_at"),
    "document": ("path", "start_line", "end_line"),
    "code": (
        "path",
        "start_line",
        "end_line",
        "repository",
        "symbol",
        "symbol_kind",
        "language",
        "parent_symbol",
    ),
}


def effective_confidence_now(row: Mapping[str, Any], now: datetime) -> float | None:
    """confidence · exp(−decay_rate · days since last confirmation), for facts and rules."""
    if row["confidence"] is None:
        return None
    return effective_confidence(
        float(row["confidence"]), float(row["decay_rate"]), row["last_confirmed_at"], now
    )


def memory_to_dict(row: Mapping[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """The API shape of a memory row: common fields plus those of its kind."""
    kind = row["kind"]
    out: dict[str, Any] = {
        "id": row["id"],
        "type": kind,
        "content": row["content"],
        "importance": row["importance"],
        "scope": row["scope"],
        "tags": list(row["tags"]),
        "metadata": row["metadata"],
        "created_at": row["created_at"],
        "reference_count": row["reference_count"],
        "last_referenced_at": row["last_referenced_at"],
    }
    for name in _KIND_FIELDS[kind]:
        if name == "effective_confidence":
            out[name] = effective_confidence_now(row, now or datetime.now(UTC))
        elif name == "valid_from":
            out[name] = row[name] or row["created_at"]  # a row stored without it: true since stored
        else:
            out[name] = row[name]
    return out


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


def write_fingerprint(item: MemoryDraft) -> bytes:
    """Digest of everything a write asked for (kind included): what an idempotency key stands for."""
    canonical = json.dumps(dataclasses.asdict(item), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).digest()


def _same_write(item: MemoryDraft, stored: Mapping[str, Any]) -> bool:
    fingerprint = stored["idempotency_fingerprint"]
    if fingerprint is not None:
        return bytes(fingerprint) == write_fingerprint(item)
    # Stored before fingerprints existed: the kind and the text are what can still be compared.
    return bool(stored["kind"] == item.kind and stored["content"] == item.content)


def _ensure_same_writes(items: Sequence[MemoryDraft], existing: Mapping[str, Mapping[str, Any]]) -> None:
    """409 when an idempotency key was first used for a different write."""
    for item in items:
        stored = existing.get(item.idempotency_key or "")
        if stored is not None and not _same_write(item, stored):
            raise ApiError(
                409,
                "idempotency_conflict",
                f"idempotency_key {item.idempotency_key!r} was already used for a different write "
                f"(a {stored['kind']} {stored['id']}); retry with the same body, or use a new key",
                {"idempotency_key": item.idempotency_key, "id": str(stored["id"]), "type": stored["kind"]},
            )


Identity = tuple[str, str, str | None, str | None, bytes]


def _identity(
    kind: str, scope: str, subject: str | None, butler: str | None, session_id: str | None, key: bytes | None
) -> Identity | None:
    """What makes two memories duplicates: kind, scope, subject (facts) or butler (episodes), content."""
    # A conversation's turns are positional: "yes" said twice in a session is two turns, not one.
    if key is None or (kind == "episode" and session_id is not None):
        return None
    return (kind, scope, subject if kind == "fact" else None, butler if kind == "episode" else None, key)


def _row_identity(row: repo.NewMemory) -> Identity | None:
    return _identity(row.kind, row.scope, row.subject, row.butler, row.session_id, row.content_key)


def _lock_key(tenant_id: str, *parts: object) -> int:
    """A 64-bit advisory lock key for a duplicate identity or a predicate slot of one tenant."""
    digest = hashlib.sha256(repr((tenant_id, *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _check_drafts(items: Sequence[MemoryDraft]) -> None:
    """422 for what the schema cannot see: valid time order, supersede without a slot."""
    for n, item in enumerate(items):
        start = item.valid_from or item.created_at
        if item.valid_to is not None and start is not None and item.valid_to <= start:
            raise ApiError(
                422,
                "validation_error",
                f"valid_to must be later than valid_from (item {n})",
                {"item": n, "field": "valid_to"},
            )
        if item.supersede == "subject_predicate" and not (item.subject and item.predicate):
            raise ApiError(
                422,
                "validation_error",
                f'supersede "subject_predicate" needs both subject and predicate (item {n})',
                {"item": n, "field": "supersede"},
            )


@dataclasses.dataclass(slots=True)
class _Truth:
    """What the write did besides storing: duplicates answered, facts superseded."""

    duplicate_of: dict[uuid.UUID, uuid.UUID] = dataclasses.field(default_factory=dict)
    superseded: dict[uuid.UUID, list[uuid.UUID]] = dataclasses.field(default_factory=dict)
    confirmed: dict[uuid.UUID, Any] = dataclasses.field(default_factory=dict)
    similar: dict[uuid.UUID, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)


def _slot(
    row: repo.NewMemory, item: MemoryDraft, settings: Mapping[str, ScopeSettings]
) -> repo.PredicateSlot | None:
    """The subject/predicate/scope a fact replaces the active facts of, when it does."""
    if row.kind != "fact" or not row.subject or not row.predicate:
        return None
    single = settings[row.scope].single_valued_predicates or ()
    if item.supersede == "subject_predicate" or row.predicate in single:
        return repo.PredicateSlot(row.subject, row.predicate, row.scope)
    return None


def _chain_within_request(
    rows: Sequence[tuple[repo.NewMemory, repo.PredicateSlot]], truth: _Truth
) -> dict[repo.PredicateSlot, repo.NewMemory]:
    """Facts of one slot in one request replace each other in request order; the first of each slot."""
    first: dict[repo.PredicateSlot, repo.NewMemory] = {}
    last: dict[repo.PredicateSlot, repo.NewMemory] = {}
    for row, slot in rows:
        before = last.get(slot)
        if before is None:
            first[slot] = row
        else:
            assert row.valid_from is not None and before.valid_from is not None
            before.validity = "superseded"
            before.superseded_by = row.id
            before.valid_to = max(before.valid_from, row.valid_from)
            row.supersedes = row.supersedes or before.id
            truth.superseded.setdefault(row.id, []).append(before.id)
        last[slot] = row
    return first


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
    _check_drafts(items)
    keys = [i.idempotency_key for i in items if i.idempotency_key]
    if len(set(keys)) != len(keys):
        raise ApiError(422, "validation_error", "idempotency_key values must be unique within one request")
    async with db.transaction([tenant_id]) as conn:
        existing = await repo.find_by_idempotency_keys(conn, tenant_id=tenant_id, keys=keys)
        settings = {
            scope: await load_scope_settings(conn, tenant_id=tenant_id, scope=scope)
            for scope in sorted({i.scope for i in items})
        }
    _ensure_same_writes(items, existing)
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
        identity = _row_identity(row)
        if identity is not None and identity in seen:
            same_as[n] = seen[identity]
            plan.append(None)
            continue
        if identity is not None:
            seen[identity] = n
        plan.append(row)
    rows = [r for r in plan if r is not None]
    drafts = {r.id: i for r, i in zip(plan, items, strict=True) if r is not None}
    truth = _Truth()
    slotted = [
        (r, slot)
        for r, i in zip(plan, items, strict=True)
        if r is not None and (slot := _slot(r, i, settings))
    ]
    first_in_slot = _chain_within_request(slotted, truth)
    # Episodes of a session are keyword-indexed with the turn before them, embedded alone
    # (app.retrieval.conversation).
    indexed = await conversation.representations(db, tenant_id=tenant_id, rows=rows)
    for row in rows:
        if row.id in indexed:
            row.search_text = search_text_for(indexed[row.id], row.tags)
    texts = [r.content for r in rows]
    batches = embedder.start_documents(texts) if embedder and rows else []
    lock_keys = [_lock_key(tenant_id, "same", i) for r in rows if (i := _row_identity(r)) is not None]
    lock_keys += [_lock_key(tenant_id, "slot", s.subject, s.predicate, s.scope) for s in first_in_slot]

    async def find_similar(conn: asyncpg.Connection, chunk: Sequence[repo.NewMemory]) -> None:
        """Report active near-duplicates of each row; merge into the closest where the scope asks."""
        probes = [
            repo.NearProbe(n, r.kind, r.scope, r.subject, r.butler, r.embedding)
            for n, r in enumerate(chunk)
            if r.embedding is not None and r.id not in truth.duplicate_of and _row_identity(r) is not None
        ]
        found = await repo.near_neighbours(
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
        for found in await repo.active_with_content_keys(
            conn, tenant_id=tenant_id, keys=sorted({r.content_key for r in rows if r.content_key is not None})
        ):
            identity = _identity(
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
            target = by_identity.get(_row_identity(row) or ("", "", None, None, b""))
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
            found = await repo.existing_ids_of_kinds(
                conn, tenant_id=tenant_id, ids=named, kinds=("fact", "rule")
            )
            missing = [str(s) for s in named if s not in found]
            if missing:
                raise ApiError(
                    422, "validation_error", f"supersedes: no fact or rule {missing[0]}", {"missing": missing}
                )
        changes = [
            repo.Supersession(r.supersedes, r.id, r.valid_from or r.created_at)
            for r in explicit
            if r.supersedes is not None
        ]
        slots = {s: r for s, r in first_in_slot.items() if r.id not in truth.duplicate_of}
        for old in await repo.lock_active_facts_in_slots(conn, tenant_id=tenant_id, slots=list(slots)):
            new = slots[repo.PredicateSlot(old["subject"], old["predicate"], old["scope"])]
            changes.append(repo.Supersession(old["id"], new.id, new.valid_from or new.created_at))
            # Oldest first: the newest one replaced is what `supersedes` names (unless the write named one).
            new.supersedes = drafts[new.id].supersedes or old["id"]
        for change in changes:
            listed = truth.superseded.setdefault(change.new, [])
            if change.old not in listed:
                listed.append(change.old)
        # Superseded rows are locked before the insert takes the tenant's usage row (trigger), the
        # order a concurrent forget of one of them (row, then usage) also follows: no deadlock.
        if changes:
            await repo.mark_superseded(conn, tenant_id=tenant_id, changes=changes)

    async def store(conn: asyncpg.Connection) -> tuple[dict[uuid.UUID, Any], dict[str, Any]]:
        # Two writes of the same memory (or of one single-valued predicate) take turns from here on:
        # the second sees the first's row.
        await repo.lock_write_keys(conn, keys=lock_keys)
        # From the drafts again: a try that was rolled back (deadlock, serialization) left its marks.
        truth.duplicate_of.clear()
        truth.superseded.clear()
        truth.similar.clear()
        for row in rows:
            draft = drafts[row.id]
            row.supersedes, row.valid_to, row.superseded_by = draft.supersedes, draft.valid_to, None
            row.validity = "active" if row.kind in ("fact", "rule") else None
        _chain_within_request(slotted, truth)
        await answer_duplicates(conn)
        await supersede(conn)
        await insert(conn)
        written = [r for r in rows if r.id not in truth.duplicate_of]
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
        _ensure_same_writes(items, existing)
    # A turn written into the middle of a session changes what the turn after it is indexed with.
    turns = conversation.turn_keys([r for r in rows if r.id not in truth.duplicate_of])
    await conversation.reindex_followers(db, tenant_id=tenant_id, keys=turns, written={t.id for t in turns})
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


async def memory_history(db: Database, principal: Principal, memory_id: uuid.UUID) -> dict[str, Any]:
    """The supersession chain a memory belongs to, newest first (just the memory when it has none)."""
    async with db.transaction([principal.tenant_id], readonly=True) as conn:
        rows = await repo.supersession_chain(conn, tenant_id=principal.tenant_id, id=memory_id)
    if not rows:
        raise not_found()
    now = datetime.now(UTC)
    return {"items": [memory_to_dict(row, now) for row in rows]}


async def get_memory(db: Database, principal: Principal, memory_id: uuid.UUID) -> dict[str, Any]:
    """memory_get: one memory, counted as a retrieval."""
    async with db.transaction([principal.tenant_id], synchronous_commit=False) as conn:
        rows = await repo.bump_references(conn, tenant_ids=[principal.tenant_id], ids=[memory_id])
    row = rows.get(memory_id)
    if row is None:
        raise not_found()
    return memory_to_dict(row)


def _encode_cursor(row: Mapping[str, Any]) -> str:
    position = f"{row['created_at'].isoformat()}|{row['id']}"
    return base64.urlsafe_b64encode(position.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        position = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created, _, memory_id = position.partition("|")
        when = datetime.fromisoformat(created)
        if when.tzinfo is None:
            raise ValueError("naive time")
        return when, uuid.UUID(memory_id)
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise ApiError(
            422, "validation_error", "cursor: not a next_cursor returned by this endpoint"
        ) from exc


async def list_memories(
    db: Database,
    principal: Principal,
    *,
    kind: str,
    scope: str | None,
    limit: int,
    cursor: str | None,
    as_of: datetime | None = None,
) -> dict[str, Any]:
    """A page of the tenant's memories of one kind, newest first; listing is not a retrieval."""
    after = _decode_cursor(cursor) if cursor else None
    async with db.transaction([principal.tenant_id], readonly=True) as conn:
        rows = await repo.list_memories(
            conn,
            tenant_id=principal.tenant_id,
            kind=kind,
            scope=scope,
            after=after,
            limit=limit + 1,
            as_of=as_of,
        )
    now = datetime.now(UTC)
    page = rows[:limit]
    return {
        "items": [memory_to_dict(row, now) for row in page],
        "next_cursor": _encode_cursor(page[-1]) if len(rows) > limit else None,
    }


async def confirm(db: Database, principal: Principal, memory_id: uuid.UUID) -> dict[str, Any]:
    """Reset a fact's or rule's confidence clock."""

    async def work(conn: asyncpg.Connection) -> asyncpg.Record:
        row = await repo.confirm_memory(conn, tenant_id=principal.tenant_id, id=memory_id)
        if row is None:
            kind = await repo.kind_of(conn, tenant_id=principal.tenant_id, id=memory_id)
            if kind is not None:
                raise ApiError(
                    422, "validation_error", f"only facts and rules can be confirmed, not a {kind}"
                )
            raise not_found()
        return row

    return memory_to_dict(await db.run([principal.tenant_id], work))


async def forget(db: Database, principal: Principal, memory_id: uuid.UUID) -> None:
    """Delete a memory for good.

    A deleted file chunk comes back with the file's next upload; the turn after a forgotten
    episode is keyword-indexed without it.
    """
    tenant_id = principal.tenant_id

    async def work(conn: asyncpg.Connection) -> repo.DeletedMemory:
        deleted = await repo.delete_memory(conn, tenant_id=tenant_id, id=memory_id)
        if deleted is None:
            raise not_found()
        # The stored file hash would call the next upload of the same file "unchanged" and the
        # chunk would never return; the path lock orders this against a concurrent upload.
        if deleted.kind == "document" and deleted.path is not None:
            await chunk_repo.lock_path(conn, tenant_id=tenant_id, path=deleted.path)
            await doc_repo.forget_content_hash(conn, tenant_id=tenant_id, path=deleted.path)
        elif deleted.kind == "code" and deleted.path is not None and deleted.repository is not None:
            await chunk_repo.lock_path(conn, tenant_id=tenant_id, path=f"{deleted.repository}:{deleted.path}")
            await code_repo.forget_content_hash(
                conn, tenant_id=tenant_id, repository=deleted.repository, path=deleted.path
            )
        return deleted

    deleted = await db.run([tenant_id], work)
    if deleted.kind == "episode" and deleted.session_id is not None and deleted.butler is not None:
        key = TurnKey(deleted.butler, deleted.session_id, deleted.created_at, memory_id)
        await conversation.reindex_followers(db, tenant_id=tenant_id, keys=[key])
