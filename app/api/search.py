"""memory_search and memory_recall."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from app.api.deps import ConnDep, Reader, StateDep
from app.api.schemas import RecallIn, RecallOut, SearchIn, SearchOut
from app.services import search as service

router = APIRouter(prefix="/v1", tags=["retrieval"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "Missing, unknown or revoked API key."},
    403: {"description": "Cross-tenant retrieval without an operator key."},
    413: {"description": "Query longer than 4,000 characters."},
    422: {"description": "Invalid field; `error.details` lists each problem."},
}


@router.post(
    "/search",
    response_model=SearchOut,
    operation_id="memory_search",
    summary="Search memories (hybrid, semantic or keyword)",
    responses=_ERRORS,
)
async def memory_search(
    body: SearchIn, response: Response, state: StateDep, conn: ConnDep, principal: Reader
) -> dict[str, Any]:
    """Hybrid BM25 + vector retrieval fused with RRF (or weighted); every result explains its score."""
    result, timings = await service.search(state, conn, principal, body)
    response.headers["Server-Timing"] = timings.header()
    return result


@router.post(
    "/recall",
    response_model=RecallOut,
    operation_id="memory_recall",
    summary="Recall facts and rules for a topic",
    responses=_ERRORS,
)
async def memory_recall(
    body: RecallIn, response: Response, state: StateDep, conn: ConnDep, principal: Reader
) -> dict[str, Any]:
    """Composite score: relevance, importance, recency and effective confidence, each reported."""
    result, timings = await service.recall(state, conn, principal, body)
    response.headers["Server-Timing"] = timings.header()
    return result
