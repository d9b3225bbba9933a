"""Memory writes and memory_get."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Response

from app.api.deps import ConnDep, Reader, StateDep, Writer
from app.api.schemas import BatchIn, BatchOut, EpisodeIn, FactIn, MemoryOut, RuleIn
from app.services import memories as service

router = APIRouter(prefix="/v1", tags=["memories"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "Missing, unknown or revoked API key."},
    403: {"description": "The key's role may not do this."},
    422: {"description": "Invalid field; `error.details` lists each problem."},
}
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    **_ERRORS,
    404: {"description": "No such memory in this tenant (other tenants' ids look the same)."},
}


@router.post(
    "/facts",
    status_code=201,
    response_model=MemoryOut,
    operation_id="memory_store_fact",
    summary="Store a fact",
    responses=_ERRORS,
)
async def store_fact(body: FactIn, state: StateDep, conn: ConnDep, principal: Writer) -> dict[str, Any]:
    """Store a fact; with `supersedes`, the old fact is marked superseded in the same transaction."""
    return (await service.write_memories(conn, state.embedder, principal, [body]))[0]


@router.post(
    "/rules",
    status_code=201,
    response_model=MemoryOut,
    operation_id="memory_store_rule",
    summary="Store a rule",
    responses=_ERRORS,
)
async def store_rule(body: RuleIn, state: StateDep, conn: ConnDep, principal: Writer) -> dict[str, Any]:
    """Store a rule or learned preference (confidence defaults to 0.5)."""
    return (await service.write_memories(conn, state.embedder, principal, [body]))[0]


@router.post(
    "/episodes",
    status_code=201,
    response_model=MemoryOut,
    operation_id="memory_store_episode",
    summary="Store an episode",
    responses=_ERRORS,
)
async def store_episode(body: EpisodeIn, state: StateDep, conn: ConnDep, principal: Writer) -> dict[str, Any]:
    """Store an episode of a butler (expires after 7 days unless expires_at says otherwise)."""
    return (await service.write_memories(conn, state.embedder, principal, [body]))[0]


@router.post(
    "/memories:batch",
    status_code=201,
    response_model=BatchOut,
    operation_id="memory_store_batch",
    summary="Store up to 1,000 memories at once",
    responses=_ERRORS,
)
async def store_batch(body: BatchIn, state: StateDep, conn: ConnDep, principal: Writer) -> dict[str, Any]:
    """All or nothing; answers the stored memories in request order; embeds in batches."""
    return {"items": await service.write_memories(conn, state.embedder, principal, body.items)}


@router.get(
    "/memories/{memory_id}",
    response_model=MemoryOut,
    operation_id="memory_get",
    summary="Get one memory",
    responses=_NOT_FOUND,
)
async def get_memory(memory_id: UUID, conn: ConnDep, principal: Reader) -> dict[str, Any]:
    """One memory by id; counts as a retrieval (reference_count + 1)."""
    return await service.get_memory(conn, principal, memory_id)


@router.post(
    "/memories/{memory_id}/confirm",
    response_model=MemoryOut,
    operation_id="memory_confirm",
    summary="Confirm a fact or rule",
    responses=_NOT_FOUND,
)
async def confirm_memory(memory_id: UUID, conn: ConnDep, principal: Writer) -> dict[str, Any]:
    """Reset last_confirmed_at to now, restoring full confidence."""
    return await service.confirm(conn, principal, memory_id)


@router.delete(
    "/memories/{memory_id}",
    status_code=204,
    operation_id="memory_forget",
    summary="Forget a memory",
    responses=_NOT_FOUND,
)
async def forget_memory(memory_id: UUID, conn: ConnDep, principal: Writer) -> Response:
    """Delete a memory for good."""
    await service.forget(conn, principal, memory_id)
    return Response(status_code=204)
