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
from app.retrieval.language import dominant_script
from app.retrieval.query import search_text_for
from app.retrieval.scoring import effective_confidence
from app.services import conversation
from app.services.quotas import ensure_within_quota
from app.services.requests import MemoryDraft

EPISODE_TTL = timedelta(days=7)

_KIND_FIELDS: dict[str, tuple[str, ...]] = {
    "fact": (
        "subject",
        "predicate",
        "confidence",
        "decay_rate",
        "last_confirmed_at",
        "validity",
        "supersedes",
        "effective_confidence",
    ),
    "rule": (
        "confidence",
        "decay_rate",
        "last_confirmed_at",
        "validity",
        "supersedes",
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
    )
    if item.kind in ("fact", "rule"):
        row.confidence = item.confidence
        row.decay_rate = item.decay_rate
        row.last_confirmed_at = item.last_confirmed_at or created
        row.validity = "active"
        row.supersedes = item.supersedes
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


async def write_memories(
    db: Database,
    embedder: Embedder | None,
    principal: Principal,
    items: Sequence[MemoryDraft],
    *,
    quota: Quota | None = None,
) -> list[dict[str, Any]]:
    """Store items all-or-nothing; a retried idempotency key with the same body returns the first memory."""
    tenant_id = principal.tenant_id
    now = datetime.now(UTC)
    keys = [i.idempotency_key for i in items if i.idempotency_key]
    if len(set(keys)) != len(keys):
        raise ApiError(422, "validation_error", "idempotency_key values must be unique within one request")
    async with db.transaction([tenant_id]) as conn:
        existing = await repo.find_by_idempotency_keys(conn, tenant_id=tenant_id, keys=keys)
    _ensure_same_writes(items, existing)
    # Per item: a new row to insert, or None when its idempotency key was written before.
    plan = [
        None if (i.idempotency_key and i.idempotency_key in existing) else _new_row(i, now) for i in items
    ]
    rows = [r for r in plan if r is not None]
    # Episodes of a session are indexed with the turn before them (app.retrieval.conversation).
    indexed = await conversation.representations(db, tenant_id=tenant_id, rows=rows)
    for row in rows:
        if row.id in indexed:
            row.search_text = search_text_for(indexed[row.id], row.tags)
    texts = [indexed.get(r.id, r.content) for r in rows]
    batches = embedder.start_documents(texts) if embedder and rows else []
    superseded = [r.supersedes for r in rows if r.supersedes is not None]

    async def insert(conn: asyncpg.Connection) -> None:
        if not batches:
            await repo.insert_memories(conn, tenant_id=tenant_id, rows=rows)
        # Each batch is written while the next one is embedded: PostgreSQL's work (HNSW insertion,
        # postings) overlaps the model's instead of following it. The transaction stays open meanwhile,
        # holding the tenant's usage row, which only this tenant's other writes wait for.
        for batch in batches:
            chunk = [rows[i] for i in batch.positions]
            for row, vector in zip(chunk, await batch.vectors, strict=True):
                row.embedding = vector
            await repo.insert_memories(conn, tenant_id=tenant_id, rows=chunk)

    async def store(conn: asyncpg.Connection) -> tuple[dict[uuid.UUID, Any], dict[str, Any]]:
        if superseded:
            found = await repo.existing_ids_of_kinds(
                conn, tenant_id=tenant_id, ids=superseded, kinds=("fact", "rule")
            )
            missing = [str(s) for s in superseded if s not in found]
            if missing:
                raise ApiError(
                    422, "validation_error", f"supersedes: no fact or rule {missing[0]}", {"missing": missing}
                )
        # Superseded rows are locked before the insert takes the tenant's usage row (trigger), the
        # order a concurrent forget of one of them (row, then usage) also follows: no deadlock.
        if superseded:
            await repo.mark_superseded(conn, tenant_id=tenant_id, ids=superseded)
        await insert(conn)
        if rows:
            await ensure_within_quota(conn, tenant_id=tenant_id, quota=quota)
        stored = await repo.fetch_memories(conn, tenant_ids=[tenant_id], ids=[r.id for r in rows])
        # A concurrent retry may have won the race for an idempotency key: return its row.
        racing = [r.idempotency_key for r in rows if r.id not in stored and r.idempotency_key]
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
    turns = conversation.turn_keys(rows)
    await conversation.reindex_followers(
        db, embedder, tenant_id=tenant_id, keys=turns, written={t.id for t in turns}
    )
    out: list[dict[str, Any]] = []
    for item, planned in zip(items, plan, strict=True):
        record = stored.get(planned.id) if planned is not None else None
        if record is None:
            assert item.idempotency_key is not None
            record = existing[item.idempotency_key]
        out.append(memory_to_dict(record, now))
    return out


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
) -> dict[str, Any]:
    """A page of the tenant's memories of one kind, newest first; listing is not a retrieval."""
    after = _decode_cursor(cursor) if cursor else None
    async with db.transaction([principal.tenant_id], readonly=True) as conn:
        rows = await repo.list_memories(
            conn, tenant_id=principal.tenant_id, kind=kind, scope=scope, after=after, limit=limit + 1
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


async def forget(db: Database, embedder: Embedder | None, principal: Principal, memory_id: uuid.UUID) -> None:
    """Delete a memory for good.

    A deleted file chunk comes back with the file's next upload; the turn after a forgotten
    episode is re-indexed without it.
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
        await conversation.reindex_followers(db, embedder, tenant_id=tenant_id, keys=[key])
