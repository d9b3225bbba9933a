"""memory_search and memory_recall."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from pydantic_core import to_json

from app.api.deps import DbDep, Reader, StateDep
from app.api.schemas.recall import RecallIn, RecallOut
from app.api.schemas.retrieval import SearchIn, SearchOut
from app.services import recall as recall_service
from app.services import search as service
from app.services.timings import Timings
from app.state import ServiceState

router = APIRouter(prefix="/v1", tags=["retrieval"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "Missing, unknown or revoked API key."},
    403: {"description": "Cross-tenant retrieval without an operator key."},
    422: {
        "description": "Invalid field (a query over 4,000 characters too); `error.details` lists each problem."
    },
}


def _json(state: ServiceState, result: dict[str, Any], timings: Timings) -> Response:
    # The service builds the documented shape itself (tests compare it with the response model);
    # re-validating it against the model on every response cost more than the fusion.
    # Phase timings are off by default: the embed phase told a tenant whether a query string was
    # already cached, i.e. searched recently (benchmarks turn them on with RECALLD_SERVER_TIMING).
    headers = {"Server-Timing": timings.header()} if state.settings.server_timing else None
    return Response(to_json(result), media_type="application/json", headers=headers)


@router.post(
    "/search",
    response_model=SearchOut,
    operation_id="memory_search",
    summary="Search memories (hybrid, semantic or keyword)",
    responses=_ERRORS,
)
async def memory_search(body: SearchIn, state: StateDep, db: DbDep, principal: Reader) -> Response:
    """Keyword (BM25) and vector retrieval, fused per query (`adaptive` by default); every result explains its score."""
    result, timings = await service.search(state, db, principal, body.to_domain())
    return _json(state, result, timings)


@router.post(
    "/recall",
    response_model=RecallOut,
    operation_id="memory_recall",
    summary="Recall facts and rules for a topic",
    responses=_ERRORS,
)
async def memory_recall(body: RecallIn, state: StateDep, db: DbDep, principal: Reader) -> Response:
    """Composite score: relevance, importance, recency and effective confidence, each reported."""
    result, timings = await recall_service.recall(state, db, principal, body.to_domain())
    return _json(state, result, timings)
