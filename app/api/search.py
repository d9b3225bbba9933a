"""memory_search and memory_recall."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from pydantic_core import to_json

from app.api.deps import ConnDep, Reader, StateDep
from app.api.schemas import RecallIn, RecallOut, SearchIn, SearchOut
from app.services import recall as recall_service
from app.services import search as service

router = APIRouter(prefix="/v1", tags=["retrieval"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "Missing, unknown or revoked API key."},
    403: {"description": "Cross-tenant retrieval without an operator key."},
    413: {"description": "Query longer than 4,000 characters."},
    422: {"description": "Invalid field; `error.details` lists each problem."},
}


def _json(result: dict[str, Any], server_timing: str) -> Response:
    # The service builds the documented shape itself (tests compare it with the response model);
    # re-validating it against the model on every response cost more than the fusion.
    return Response(to_json(result), media_type="application/json", headers={"Server-Timing": server_timing})


@router.post(
    "/search",
    response_model=SearchOut,
    operation_id="memory_search",
    summary="Search memories (hybrid, semantic or keyword)",
    responses=_ERRORS,
)
async def memory_search(body: SearchIn, state: StateDep, conn: ConnDep, principal: Reader) -> Response:
    """Hybrid BM25 + vector retrieval fused with RRF (or weighted); every result explains its score."""
    result, timings = await service.search(state, conn, principal, body.to_domain())
    return _json(result, timings.header())


@router.post(
    "/recall",
    response_model=RecallOut,
    operation_id="memory_recall",
    summary="Recall facts and rules for a topic",
    responses=_ERRORS,
)
async def memory_recall(body: RecallIn, state: StateDep, conn: ConnDep, principal: Reader) -> Response:
    """Composite score: relevance, importance, recency and effective confidence, each reported."""
    result, timings = await recall_service.recall(state, conn, principal, body.to_domain())
    return _json(result, timings.header())
