"""A memory as clients see it; reading, listing, confirming and forgetting (one tenant transaction each)."""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import asyncpg

from app.auth import Principal
from app.errors import ApiError, not_found
from app.infra.db import Database
from app.repositories import chunks as chunk_repo
from app.repositories import code as code_repo
from app.repositories import documents as doc_repo
from app.repositories import memories as repo
from app.repositories import memory_truth as truth_repo
from app.repositories.conversation import TurnKey
from app.retrieval.scoring import effective_confidence
from app.services import conversation

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


async def memory_history(db: Database, principal: Principal, memory_id: uuid.UUID) -> dict[str, Any]:
    """The supersession chain a memory belongs to, newest first (just the memory when it has none)."""
    async with db.transaction([principal.tenant_id], readonly=True) as conn:
        rows = await truth_repo.supersession_chain(conn, tenant_id=principal.tenant_id, id=memory_id)
    if not rows:
        raise not_found()
    now = datetime.now(UTC)
    return {"items": [memory_to_dict(row, now) for row in rows]}


async def get_memory(db: Database, principal: Principal, memory_id: uuid.UUID) -> dict[str, Any]:
    """memory_get: one memory, counted as a retrieval."""

    async def work(conn: asyncpg.Connection) -> dict[uuid.UUID, asyncpg.Record]:
        return await repo.bump_references(conn, tenant_ids=[principal.tenant_id], ids=[memory_id])

    rows = await db.run([principal.tenant_id], work, synchronous_commit=False)
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
        elif deleted.kind == "episode" and deleted.session_id is not None and deleted.butler is not None:
            key = TurnKey(deleted.butler, deleted.session_id, deleted.created_at, memory_id)
            await conversation.reindex_followers(conn, tenant_id=tenant_id, keys=[key])
        return deleted

    await db.run([tenant_id], work)
