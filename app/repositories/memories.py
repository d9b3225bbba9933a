"""SQL for memory rows: inserts, reads, confirmation, deletion and usage. One function per statement."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from app.embeddings.base import SwitchVector, Vector
from app.repositories.embedding_switch import RUNNING_SWITCH_ID
from app.repositories.search.filters import Sql, valid_clauses

MEMORY_COLUMNS = (
    "id, kind, content, importance, scope, tags, metadata, created_at, reference_count, "
    "last_referenced_at, subject, predicate, confidence, decay_rate, last_confirmed_at, validity, "
    "supersedes, butler, session_id, expires_at, path, start_line, end_line, repository, symbol, "
    "symbol_kind, language, parent_symbol, valid_from, valid_to, superseded_by"
)

INSERT_COLUMNS = (
    "tenant_id",
    "id",
    "kind",
    "content",
    "search_text",
    "embedding",
    "importance",
    "scope",
    "tags",
    "metadata",
    "created_at",
    "idempotency_key",
    "idempotency_fingerprint",
    "subject",
    "predicate",
    "confidence",
    "decay_rate",
    "last_confirmed_at",
    "validity",
    "supersedes",
    "butler",
    "session_id",
    "expires_at",
    "path",
    "start_line",
    "end_line",
    "content_hash",
    "repository",
    "symbol",
    "symbol_kind",
    "language",
    "parent_symbol",
    "script",
    "content_key",
    "valid_from",
    "valid_to",
    "superseded_by",
)


def _insert_sql(columns: Sequence[str], values: Sequence[str]) -> str:
    return (
        f"INSERT INTO memory ({', '.join(columns)}) VALUES ({', '.join(values)}) "
        "ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING"
    )


_PARAMETERS = [f"${i}" for i in range(1, len(INSERT_COLUMNS) + 1)]
_INSERT_SQL = _insert_sql(INSERT_COLUMNS, _PARAMETERS)
# While an embedding model switch runs, writes store the new model's vector too (embedding_switch),
# if the switch it was embedded for is the one recorded now: an abort and a new switch may follow
# each other before the serving process stops lending the first one's model. Read in the insert
# itself: it locks memory before taking its snapshot, and a switch's start or abort changes the
# record and the column together under an exclusive lock on memory, so no interleaving slips past.
# Otherwise NULL (the worker embeds the row); `vector` of no fixed size, so a vector of another
# dimension is dropped, not a DataError (and cast to halfvec on assignment where the column is one).
_NEXT, _SWITCH = len(INSERT_COLUMNS) + 1, len(INSERT_COLUMNS) + 2
_INSERT_WITH_NEXT_SQL = _insert_sql(
    (*INSERT_COLUMNS, "embedding_next"),
    (*_PARAMETERS, f"CASE WHEN ${_SWITCH}::text = {RUNNING_SWITCH_ID} THEN ${_NEXT}::vector END"),
)


@dataclass(slots=True)
class NewMemory:
    """A row to insert; kind-specific fields stay None for other kinds."""

    id: uuid.UUID
    kind: str
    content: str
    search_text: str
    created_at: datetime
    embedding: Vector | None = None
    importance: float = 5.0
    scope: str = "global"
    tags: Sequence[str] = ()
    metadata: dict[str, Any] | None = None
    idempotency_key: str | None = None
    idempotency_fingerprint: bytes | None = None
    subject: str | None = None
    predicate: str | None = None
    confidence: float | None = None
    decay_rate: float | None = None
    last_confirmed_at: datetime | None = None
    validity: str | None = None
    supersedes: uuid.UUID | None = None
    butler: str | None = None
    session_id: str | None = None
    expires_at: datetime | None = None
    path: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    content_hash: str | None = None
    repository: str | None = None
    symbol: str | None = None
    symbol_kind: str | None = None
    language: str | None = None
    parent_symbol: str | None = None
    script: str | None = None  # the content's writing system (app.retrieval.language)
    content_key: bytes | None = None  # app.retrieval.duplicates.content_key, facts/rules/episodes
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    superseded_by: uuid.UUID | None = None
    # A running model switch's vector of the same text (repositories.embedding_switch).
    embedding_next: SwitchVector | None = None

    def values(self, tenant_id: str) -> tuple[Any, ...]:
        """Positional values in INSERT_COLUMNS order."""
        row = {name: getattr(self, name) for name in INSERT_COLUMNS if name != "tenant_id"}
        row["tags"] = list(self.tags)
        row["metadata"] = self.metadata or {}
        return (uuid.UUID(tenant_id), *row.values())


async def insert_memories(conn: asyncpg.Connection, *, tenant_id: str, rows: Sequence[NewMemory]) -> None:
    """Insert rows (pipelined); a row whose idempotency key already exists is skipped.

    Rows holding a model switch's new-model vectors are inserted with those of them that belong to
    the switch running now (_INSERT_WITH_NEXT_SQL) while a switch's column exists. An abort
    (`recalld embeddings abort` with no live worker) may drop it between the write's embedding and
    this insert, and the serving process lends the new model to writes until its worker sees the
    switch is gone: then the rows are inserted without those vectors, in the same transaction (the
    attempt is a savepoint), since an ended switch needs none of them.
    """
    if any(row.embedding_next is not None for row in rows):
        try:
            async with conn.transaction():
                await conn.executemany(
                    _INSERT_WITH_NEXT_SQL, [(*row.values(tenant_id), *_switch_values(row)) for row in rows]
                )
            return
        except asyncpg.UndefinedColumnError:
            pass  # embedding_next is the only column _INSERT_SQL lacks: another missing one fails below
    if rows:
        await conn.executemany(_INSERT_SQL, [row.values(tenant_id) for row in rows])


def _switch_values(row: NewMemory) -> tuple[Vector | None, str | None]:
    """The new-model vector and its switch's id, in _INSERT_WITH_NEXT_SQL's order."""
    nxt = row.embedding_next
    return (nxt.vector, nxt.switch_id) if nxt is not None else (None, None)


async def find_by_idempotency_keys(
    conn: asyncpg.Connection, *, tenant_id: str, keys: Sequence[str]
) -> dict[str, asyncpg.Record]:
    """Existing memories written with these idempotency keys."""
    if not keys:
        return {}
    rows = await conn.fetch(
        f"SELECT idempotency_key, idempotency_fingerprint, {MEMORY_COLUMNS} FROM memory "
        "WHERE tenant_id = $1 AND idempotency_key = ANY($2::text[])",
        uuid.UUID(tenant_id),
        list(keys),
    )
    return {r["idempotency_key"]: r for r in rows}


async def fetch_memories(
    conn: asyncpg.Connection, *, tenant_ids: Sequence[str], ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, asyncpg.Record]:
    """Memories by id (missing ids are left out)."""
    rows = await conn.fetch(
        f"SELECT tenant_id, {MEMORY_COLUMNS} FROM memory WHERE tenant_id = ANY($1::uuid[]) AND id = ANY($2::uuid[])",
        [uuid.UUID(t) for t in tenant_ids],
        list(ids),
    )
    return {r["id"]: r for r in rows}


@dataclass(frozen=True, slots=True)
class RecallSignals:
    """What recall scores a fact or rule by, besides relevance (constraints make these non-null)."""

    importance: float
    confidence: float
    decay_rate: float
    last_confirmed_at: datetime
    last_referenced_at: datetime | None
    created_at: datetime
    content_key: bytes | None


async def recall_signals(
    conn: asyncpg.Connection, *, tenant_ids: Sequence[str], ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, RecallSignals]:
    """The scoring columns of a recall pool of facts and rules; content is read for the final rows only."""
    # One primary-key probe per (tenant, id). For `tenant_id = ANY($1) AND id = ANY($2)` the
    # planner chose the tenant's whole (tenant_id, kind, created_at) index instead: for a pool of
    # 25 or more ids, and in the generic plan PostgreSQL uses for a prepared statement (asyncpg
    # prepares them all) after five runs, which cannot see the array's length (about 35 ms for 50
    # ids at 50,000 memories, against 4-5; docs/benchmarks.md, S2). A lateral lookup with OFFSET 0
    # cannot be turned into a scan over the tenant whatever the plan.
    rows = await conn.fetch(
        "SELECT m.id, m.importance, m.confidence, m.decay_rate, m.last_confirmed_at, m.last_referenced_at, "
        "m.created_at, m.content_key FROM unnest($1::uuid[]) AS t(id) CROSS JOIN unnest($2::uuid[]) AS i(id) "
        "CROSS JOIN LATERAL (SELECT m.id, m.kind, m.importance, m.confidence, m.decay_rate, "
        "m.last_confirmed_at, m.last_referenced_at, m.created_at, m.content_key FROM memory m "
        "WHERE m.tenant_id = t.id AND m.id = i.id OFFSET 0) m WHERE m.kind IN ('fact', 'rule')",
        [uuid.UUID(t) for t in tenant_ids],
        list(ids),
    )
    return {
        r["id"]: RecallSignals(
            r["importance"],
            r["confidence"],
            r["decay_rate"],
            r["last_confirmed_at"],
            r["last_referenced_at"],
            r["created_at"],
            bytes(r["content_key"]) if r["content_key"] is not None else None,
        )
        for r in rows
    }


async def confirm_memories(
    conn: asyncpg.Connection, *, tenant_id: str, ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, asyncpg.Record]:
    """Reset last_confirmed_at of these facts and rules; return every one of ids as it is after."""
    if not ids:
        return {}
    await conn.execute(
        "UPDATE memory SET last_confirmed_at = now() WHERE tenant_id = $1 AND id = ANY($2::uuid[]) "
        "AND kind IN ('fact', 'rule')",
        uuid.UUID(tenant_id),
        list(ids),
    )
    return await fetch_memories(conn, tenant_ids=[tenant_id], ids=ids)


async def bump_references(
    conn: asyncpg.Connection, *, tenant_ids: Sequence[str], ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, asyncpg.Record]:
    """Count a retrieval of these memories (one UPDATE) and return them as they are after it."""
    # Expired episodes are left out: they are never returned (R-M3), not even by id.
    if not ids:
        return {}
    rows = await conn.fetch(
        "UPDATE memory SET reference_count = reference_count + 1, last_referenced_at = now() "
        "WHERE tenant_id = ANY($1::uuid[]) AND id = ANY($2::uuid[]) "
        f"AND (expires_at IS NULL OR expires_at > now()) RETURNING tenant_id, {MEMORY_COLUMNS}",
        [uuid.UUID(t) for t in tenant_ids],
        list(ids),
    )
    return {r["id"]: r for r in rows}


async def list_memories(
    conn: asyncpg.Connection,
    *,
    tenant_id: str,
    kind: str,
    scope: str | None,
    after: tuple[datetime, uuid.UUID] | None,
    limit: int,
    as_of: datetime | None = None,
) -> list[asyncpg.Record]:
    """Memories of one kind, newest first (ties by id), after a (created_at, id) position.

    With as_of, only what was valid then (search's rule); without, every stored one, superseded too.
    """
    # Ordered as memory_tenant_kind_created_idx, so a page reads only its own rows of that index.
    after_created, after_id = after if after is not None else (None, None)
    sql = Sql([uuid.UUID(tenant_id), kind, scope, after_created, after_id, limit])
    valid = "".join(f" AND {c}" for c in valid_clauses(sql, as_of)) if as_of is not None else ""
    rows: list[asyncpg.Record] = await conn.fetch(
        f"SELECT {MEMORY_COLUMNS} FROM memory m WHERE tenant_id = $1 AND kind = $2 "
        # An episode's scope is its butler (R-S10a), as search filters it.
        "AND ($3::text IS NULL OR CASE WHEN kind = 'episode' THEN butler ELSE scope END = $3) "
        "AND (expires_at IS NULL OR expires_at > now()) "
        f"AND ($4::timestamptz IS NULL OR created_at < $4 OR (created_at = $4 AND id > $5)){valid} "
        "ORDER BY created_at DESC, id LIMIT $6",
        *sql.params,
    )
    return rows


async def confirm_memory(conn: asyncpg.Connection, *, tenant_id: str, id: uuid.UUID) -> asyncpg.Record | None:
    """Reset last_confirmed_at of a fact or rule."""
    row: asyncpg.Record | None = await conn.fetchrow(
        "UPDATE memory SET last_confirmed_at = now() WHERE tenant_id = $1 AND id = $2 "
        f"AND kind IN ('fact', 'rule') RETURNING {MEMORY_COLUMNS}",
        uuid.UUID(tenant_id),
        id,
    )
    return row


async def kind_of(conn: asyncpg.Connection, *, tenant_id: str, id: uuid.UUID) -> str | None:
    """The kind of a memory, or None when it does not exist in the tenant."""
    kind: str | None = await conn.fetchval(
        "SELECT kind FROM memory WHERE tenant_id = $1 AND id = $2", uuid.UUID(tenant_id), id
    )
    return kind


@dataclass(frozen=True, slots=True)
class DeletedMemory:
    """What a deletion leaves to tidy up: an episode's place in its conversation, a chunk's file."""

    kind: str
    butler: str | None
    session_id: str | None
    created_at: datetime
    path: str | None
    repository: str | None


async def delete_memory(conn: asyncpg.Connection, *, tenant_id: str, id: uuid.UUID) -> DeletedMemory | None:
    """Forget one memory; None when it does not exist in the tenant."""
    row = await conn.fetchrow(
        "DELETE FROM memory WHERE tenant_id = $1 AND id = $2 "
        "RETURNING kind, butler, session_id, created_at, path, repository",
        uuid.UUID(tenant_id),
        id,
    )
    return (
        None
        if row is None
        else DeletedMemory(
            row["kind"], row["butler"], row["session_id"], row["created_at"], row["path"], row["repository"]
        )
    )


async def delete_memories(conn: asyncpg.Connection, *, tenant_id: str, ids: Sequence[uuid.UUID]) -> None:
    """Delete rows by id."""
    if ids:
        await conn.execute(
            "DELETE FROM memory WHERE tenant_id = $1 AND id = ANY($2::uuid[])",
            uuid.UUID(tenant_id),
            list(ids),
        )


@dataclass(frozen=True, slots=True)
class TenantUsage:
    """What a tenant stores: memory rows and their content + metadata bytes."""

    memories: int
    bytes: int


async def tenant_usage(conn: asyncpg.Connection, *, tenant_id: str) -> TenantUsage:
    """The tenant's usage row, kept by the memory triggers (zero when it never stored anything)."""
    row = await conn.fetchrow(
        "SELECT memories, bytes FROM tenant_usage WHERE tenant_id = $1", uuid.UUID(tenant_id)
    )
    return TenantUsage(int(row["memories"]), int(row["bytes"])) if row else TenantUsage(0, 0)
