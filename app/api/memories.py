"""Memory writes and memory_get."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Path, Query, Response

from app.api.deps import DbDep, Reader, StateDep, Writer
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
from app.services import memories as service

router = APIRouter(prefix="/v1", tags=["memories"])

MemoryId = Annotated[
    UUID,
    Path(
        description="Id of the memory (from a write or a search).",
        openapi_examples={"example": {"value": "5a4744e1-b384-42ad-b3e8-ea224528b272"}},
    ),
]

_BY_ID: dict[int | str, dict[str, Any]] = {
    401: {"description": "Missing, unknown or revoked API key."},
    404: {"description": "No such memory in this tenant (other tenants' ids look the same)."},
    422: {"description": "The id is not a UUID."},
}
_WRITE_BY_ID: dict[int | str, dict[str, Any]] = {
    **_BY_ID,
    403: {"description": "Needs the writer role."},
    422: {"description": "The id is not a UUID; confirm: the memory is not a fact or rule."},
}
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "Missing, unknown or revoked API key."},
    403: {"description": "Needs the writer role."},
    413: {"description": "The tenant's storage quota reached (`quota_exceeded`)."},
    422: {
        "description": "Invalid field (content over 64 KiB, a batch of more than 1,000 items too); "
        "`error.details` lists each problem."
    },
}
_DUPLICATE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "A duplicate: an active memory of the same kind, scope and subject/butler says the "
        "same (normalised); it answers, confirmed, with `duplicate_of` set. Nothing new is stored.",
        "model": MemoryWriteOut,
    },
    201: {"description": "Stored; `superseded` and `similar_to` say what else the write found or did."},
}


def _answer(response: Response, written: dict[str, Any]) -> dict[str, Any]:
    """200 instead of 201 when the write only found what was already there."""
    if written["duplicate_of"] is not None:
        response.status_code = 200
    return written


@router.post(
    "/facts",
    status_code=201,
    response_model=MemoryWriteOut,
    operation_id="memory_store_fact",
    summary="Store a fact",
    responses={**_DUPLICATE, **_ERRORS},
)
async def store_fact(
    body: FactIn, state: StateDep, db: DbDep, principal: Writer, response: Response
) -> dict[str, Any]:
    """Store a fact; `supersedes` (an id) or `supersede: "subject_predicate"` replace older facts, in the same transaction."""
    written = await service.write_memories(
        db, state.embedder, principal, [body.to_draft()], quota=state.quota
    )
    return _answer(response, written[0])


@router.post(
    "/rules",
    status_code=201,
    response_model=MemoryWriteOut,
    operation_id="memory_store_rule",
    summary="Store a rule",
    responses={**_DUPLICATE, **_ERRORS},
)
async def store_rule(
    body: RuleIn, state: StateDep, db: DbDep, principal: Writer, response: Response
) -> dict[str, Any]:
    """Store a rule or learned preference (confidence defaults to 0.5)."""
    written = await service.write_memories(
        db, state.embedder, principal, [body.to_draft()], quota=state.quota
    )
    return _answer(response, written[0])


@router.post(
    "/episodes",
    status_code=201,
    response_model=MemoryWriteOut,
    operation_id="memory_store_episode",
    summary="Store an episode",
    responses={**_DUPLICATE, **_ERRORS},
)
async def store_episode(
    body: EpisodeIn, state: StateDep, db: DbDep, principal: Writer, response: Response
) -> dict[str, Any]:
    """Store an episode of a butler (expires after 7 days unless expires_at says otherwise)."""
    written = await service.write_memories(
        db, state.embedder, principal, [body.to_draft()], quota=state.quota
    )
    return _answer(response, written[0])


@router.post(
    "/memories:batch",
    status_code=201,
    response_model=BatchOut,
    operation_id="memory_store_batch",
    summary="Store up to 1,000 memories at once",
    responses={
        200: {
            "description": "Every item was a duplicate (each has `duplicate_of`); nothing new stored.",
            "model": BatchOut,
        },
        **_ERRORS,
    },
)
async def store_batch(
    body: BatchIn, state: StateDep, db: DbDep, principal: Writer, response: Response
) -> dict[str, Any]:
    """All or nothing; answers each item in request order (duplicates with `duplicate_of`); embeds in batches."""
    items = await service.write_memories(
        db, state.embedder, principal, [i.to_draft() for i in body.items], quota=state.quota
    )
    if all(i["duplicate_of"] is not None for i in items):
        response.status_code = 200
    return {"items": items}


@router.get(
    "/memories",
    response_model=MemoryPage,
    operation_id="memory_list",
    summary="List memories of one kind",
    responses={
        401: {"description": "Missing, unknown or revoked API key."},
        422: {"description": "Unknown type, invalid scope or limit, or a cursor this endpoint did not give."},
    },
)
async def list_memories(
    db: DbDep,
    principal: Reader,
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
) -> dict[str, Any]:
    """Browse stored memories, newest first; unlike memory_get this does not count as a retrieval."""
    return await service.list_memories(
        db, principal, kind=memory_type, scope=scope, limit=limit, cursor=cursor, as_of=as_of
    )


@router.get(
    "/memories/{memory_id}",
    response_model=MemoryOut,
    operation_id="memory_get",
    summary="Get one memory",
    responses=_BY_ID,
)
async def get_memory(memory_id: MemoryId, db: DbDep, principal: Reader) -> dict[str, Any]:
    """One memory by id; counts as a retrieval (reference_count + 1)."""
    return await service.get_memory(db, principal, memory_id)


@router.get(
    "/memories/{memory_id}/history",
    response_model=MemoryHistory,
    operation_id="memory_history",
    summary="How a fact changed",
    responses=_BY_ID,
)
async def memory_history(memory_id: MemoryId, db: DbDep, principal: Reader) -> dict[str, Any]:
    """The supersession chain of a memory, newest first (only the memory itself when nothing replaced it)."""
    return await service.memory_history(db, principal, memory_id)


@router.post(
    "/memories/{memory_id}/confirm",
    response_model=MemoryOut,
    operation_id="memory_confirm",
    summary="Confirm a fact or rule",
    responses=_WRITE_BY_ID,
)
async def confirm_memory(memory_id: MemoryId, db: DbDep, principal: Writer) -> dict[str, Any]:
    """Reset last_confirmed_at to now, restoring full confidence."""
    return await service.confirm(db, principal, memory_id)


@router.delete(
    "/memories/{memory_id}",
    status_code=204,
    operation_id="memory_forget",
    summary="Forget a memory",
    responses=_WRITE_BY_ID,
)
async def forget_memory(memory_id: MemoryId, state: StateDep, db: DbDep, principal: Writer) -> Response:
    """Delete a memory for good."""
    await service.forget(db, state.embedder, principal, memory_id)
    return Response(status_code=204)
