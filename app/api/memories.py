"""Memory writes, memory_get, memory_list, memory_history, confirm and forget."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import Path, Query

from app.api.mcp_tool import Gate
from app.api.operation import Mcp, Operation, Responses, Rest, routes
from app.api.schemas.common import MemoryType, ScopeName, Timestamp
from app.api.schemas.memories import (
    BatchIn,
    BatchOut,
    EpisodeIn,
    FactIn,
    MemoryHistory,
    MemoryOut,
    MemoryPage,
    MemoryWriteOut,
    RuleIn,
)
from app.api.schemas.parameters import MemoryForgotten, MemoryIdIn, MemoryListIn
from app.auth import Principal
from app.infra.db import Database
from app.services import memories as service
from app.services.memory_writes import write_memories
from app.state import ServiceState

MemoryId = Annotated[
    UUID,
    Path(
        description="Id of the memory (from a write or a search).",
        openapi_examples={"example": {"value": "5a4744e1-b384-42ad-b3e8-ea224528b272"}},
    ),
]

_BY_ID: Responses = {
    401: {"description": "Missing, unknown or revoked API key."},
    404: {"description": "No such memory in this tenant (other tenants' ids look the same)."},
    422: {"description": "The id is not a UUID."},
}
_WRITE_BY_ID: Responses = {
    **_BY_ID,
    403: {"description": "Needs the writer role."},
    422: {"description": "The id is not a UUID; confirm: the memory is not a fact or rule."},
}
_ERRORS: Responses = {
    401: {"description": "Missing, unknown or revoked API key."},
    403: {"description": "Needs the writer role."},
    413: {"description": "The tenant's storage quota reached (`quota_exceeded`)."},
    422: {
        "description": "Invalid field (content over 64 KiB, a batch of more than 1,000 items too); "
        "`error.details` lists each problem."
    },
}
_DUPLICATE: Responses = {
    200: {
        "description": "A duplicate: an active memory of the same kind, scope and subject/butler says the "
        "same (normalised); it answers, confirmed, with `duplicate_of` set. Nothing new is stored.",
        "model": MemoryWriteOut,
    },
    201: {"description": "Stored; `superseded` and `similar_to` say what else the write found or did."},
}
# The store tools declare MemoryOut: the answer's duplicate_of, superseded and similar_to come as
# extra fields, undeclared, since declaring them costs tools/list 280 characters per tool.
# Back-dating is for importing what happened before; an agent writing as it goes leaves them unset.
_WRITE_GATES: dict[str, Gate] = {
    "created_at": "import",
    "last_confirmed_at": "import",
    "valid_from": "import",
    "valid_to": "import",
}
_WRITE_HINTS = {
    "tags": "Labels (search can filter by them).",
    "metadata": "Any JSON object (<= 16 KiB), returned as stored.",
    "idempotency_key": "A retry with the same key returns the first result.",
}
_FACT_HINTS = {
    **_WRITE_HINTS,
    "supersede": '"subject_predicate": replaces older facts of this subject+predicate.',
    "supersedes": "Id of a fact this replaces.",
}


def _written(written: dict[str, Any]) -> int:
    # 200 instead of 201 when the write only found what was already there.
    return 200 if written["duplicate_of"] is not None else 201


def _batch_written(batch: dict[str, Any]) -> int:
    return 200 if all(item["duplicate_of"] is not None for item in batch["items"]) else 201


async def _by_id(memory_id: MemoryId) -> MemoryIdIn:
    return MemoryIdIn.model_construct(id=memory_id)


async def _listing(
    memory_type: Annotated[
        MemoryType,
        Query(
            alias="type",
            description="Kind to list: fact, rule, episode, document or code.",
            openapi_examples={"example": {"value": "fact"}},
        ),
    ],
    scope: Annotated[
        ScopeName | None,
        Query(
            description="Only memories stored with exactly this scope (no `global` added).",
            openapi_examples={"example": {"value": "health"}},
        ),
    ] = None,
    limit: Annotated[
        int,
        Query(
            ge=1,
            le=100,
            description="Most memories on this page, 1–100 (default 20).",
            openapi_examples={"example": {"value": 20}},
        ),
    ] = 20,
    cursor: Annotated[
        str | None,
        Query(
            max_length=200,
            description="`next_cursor` of the previous page; omit for the first page.",
            openapi_examples={"example": {"value": "MjAyNi0xMS0yMFQw..."}},
        ),
    ] = None,
    as_of: Annotated[
        Timestamp | None,
        Query(
            description="Only what was valid at this time (superseded facts included); without it, "
            "every stored memory of the kind, superseded ones too (see `validity`).",
            openapi_examples={"example": {"value": "2026-06-01T00:00:00Z"}},
        ),
    ] = None,
) -> MemoryListIn:
    return MemoryListIn.model_construct(
        type=memory_type, scope=scope, limit=limit, cursor=cursor, as_of=as_of
    )


async def _store(
    state: ServiceState, db: Database, who: Principal, args: FactIn | RuleIn | EpisodeIn
) -> dict[str, Any]:
    return (await write_memories(db, state.embedder, who, [args.to_draft()], quota=state.quota))[0]


async def _store_batch(state: ServiceState, db: Database, who: Principal, args: BatchIn) -> dict[str, Any]:
    drafts = [item.to_draft() for item in args.items]
    return {"items": await write_memories(db, state.embedder, who, drafts, quota=state.quota)}


async def _list(state: ServiceState, db: Database, who: Principal, args: MemoryListIn) -> dict[str, Any]:
    return await service.list_memories(
        db, who, kind=args.type, scope=args.scope, limit=args.limit, cursor=args.cursor, as_of=args.as_of
    )


async def _get(state: ServiceState, db: Database, who: Principal, args: MemoryIdIn) -> dict[str, Any]:
    return await service.get_memory(db, who, args.id)


async def _history(state: ServiceState, db: Database, who: Principal, args: MemoryIdIn) -> dict[str, Any]:
    return await service.memory_history(db, who, args.id)


async def _confirm(state: ServiceState, db: Database, who: Principal, args: MemoryIdIn) -> dict[str, Any]:
    return await service.confirm(db, who, args.id)


async def _forget(state: ServiceState, db: Database, who: Principal, args: MemoryIdIn) -> dict[str, Any]:
    await service.forget(db, who, args.id)
    return {"id": args.id, "forgotten": True}


OPERATIONS = (
    Operation(
        "memory_store_fact",
        "writer",
        FactIn,
        MemoryOut,
        _store,
        Rest(
            "POST",
            "/facts",
            "Store a fact",
            'Store a fact; `supersedes` (an id) or `supersede: "subject_predicate"` replace older facts, in '
            "the same transaction.",
            status_code=201,
            responses={**_DUPLICATE, **_ERRORS},
            status_of=_written,
            response_model=MemoryWriteOut,
        ),
        Mcp(
            "Remember a fact; a repeat answers the stored one.",
            "memory",
            "add",
            gated=_WRITE_GATES,
            hints=_FACT_HINTS,
        ),
    ),
    Operation(
        "memory_store_rule",
        "writer",
        RuleIn,
        MemoryOut,
        _store,
        Rest(
            "POST",
            "/rules",
            "Store a rule",
            "Store a rule or learned preference (confidence defaults to 0.5).",
            status_code=201,
            responses={**_DUPLICATE, **_ERRORS},
            status_of=_written,
            response_model=MemoryWriteOut,
        ),
        Mcp(
            "Remember a rule or preference to follow.",
            "memory",
            "add",
            gated=_WRITE_GATES,
            hints=_WRITE_HINTS,
        ),
    ),
    Operation(
        "memory_store_episode",
        "writer",
        EpisodeIn,
        MemoryOut,
        _store,
        Rest(
            "POST",
            "/episodes",
            "Store an episode",
            "Store an episode of a butler (expires after 7 days unless expires_at says otherwise).",
            status_code=201,
            responses={**_DUPLICATE, **_ERRORS},
            status_of=_written,
            response_model=MemoryWriteOut,
        ),
        Mcp(
            "Remember something that happened to an agent (`butler`); it expires after 7 days unless "
            "`expires_at` says otherwise.",
            "memory",
            "add",
            gated=_WRITE_GATES,
            hints=_WRITE_HINTS,
        ),
    ),
    Operation(
        "memory_store_batch",
        "writer",
        BatchIn,
        BatchOut,
        _store_batch,
        Rest(
            "POST",
            "/memories:batch",
            "Store up to 1,000 memories at once",
            "All or nothing; answers each item in request order (duplicates with `duplicate_of`); embeds in "
            "batches.",
            status_code=201,
            responses={
                200: {
                    "description": "Every item was a duplicate (each has `duplicate_of`); nothing new stored.",
                    "model": BatchOut,
                },
                **_ERRORS,
            },
            status_of=_batch_written,
        ),
        Mcp("Store 1–1,000 facts, rules and episodes, all or nothing.", "import", "add"),
    ),
    Operation(
        "memory_list",
        "reader",
        MemoryListIn,
        MemoryPage,
        _list,
        Rest(
            "GET",
            "/memories",
            "List memories of one kind",
            "Browse stored memories, newest first; unlike memory_get this does not count as a retrieval.",
            params=_listing,
            responses={
                401: {"description": "Missing, unknown or revoked API key."},
                422: {
                    "description": "Unknown type, invalid scope or limit, or a cursor this endpoint did not give."
                },
            },
        ),
        Mcp("Memories of one kind (and scope), newest first, a page at a time.", "curation", "read"),
    ),
    Operation(
        "memory_get",
        "reader",
        MemoryIdIn,
        MemoryOut,
        _get,
        Rest(
            "GET",
            "/memories/{memory_id}",
            "Get one memory",
            "One memory by id; counts as a retrieval (reference_count + 1).",
            params=_by_id,
            responses=_BY_ID,
        ),
        Mcp("One memory by id.", "memory", "read"),
    ),
    Operation(
        "memory_history",
        "reader",
        MemoryIdIn,
        MemoryHistory,
        _history,
        Rest(
            "GET",
            "/memories/{memory_id}/history",
            "How a fact changed",
            "The supersession chain of a memory, newest first (only the memory itself when nothing replaced "
            "it).",
            params=_by_id,
            responses=_BY_ID,
        ),
        Mcp("How a fact changed: what it replaced or was replaced by, newest first.", "curation", "read"),
    ),
    Operation(
        "memory_confirm",
        "writer",
        MemoryIdIn,
        MemoryOut,
        _confirm,
        Rest(
            "POST",
            "/memories/{memory_id}/confirm",
            "Confirm a fact or rule",
            "Reset last_confirmed_at to now, restoring full confidence.",
            params=_by_id,
            responses=_WRITE_BY_ID,
        ),
        Mcp("Confirm a fact or rule is still true: its confidence is whole again.", "curation", "update"),
    ),
    Operation(
        "memory_forget",
        "writer",
        MemoryIdIn,
        MemoryForgotten,
        _forget,
        Rest(
            "DELETE",
            "/memories/{memory_id}",
            "Forget a memory",
            "Delete a memory for good.",
            status_code=204,
            params=_by_id,
            responses=_WRITE_BY_ID,
        ),
        Mcp("Delete a memory for good.", "memory", "delete"),
    ),
)

router = routes(OPERATIONS, prefix="/v1", tags=["memories"])
