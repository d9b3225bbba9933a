"""memory_search and memory_recall."""

from __future__ import annotations

from typing import Any

from fastapi import Response
from pydantic_core import to_json

from app.api.mcp_tool import OPERATOR, Gate
from app.api.operation import Mcp, Operation, Rest, Timed, routes
from app.api.schemas.recall import RecallIn, RecallOut
from app.api.schemas.retrieval import SearchIn, SearchOut
from app.auth import Principal
from app.infra.db import Database
from app.services import recall as recall_service
from app.services import search as search_service
from app.state import ServiceState

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "Missing, unknown or revoked API key."},
    403: {"description": "Cross-tenant retrieval without an operator key."},
    422: {
        "description": "Invalid field (a query over 4,000 characters too); `error.details` lists each problem."
    },
}
_SEARCH_GATES: dict[str, Gate] = {
    "tenants": OPERATOR,
    "all_tenants": OPERATOR,
    "repository": "code",
    "file_filter": "code",
    "exclude_filter": "code",
    "symbol": "code",
    "depth": "code",
    "fusion": "tuning",
    "weights": "tuning",
    "min_similarity": "tuning",
    "min_confidence": "tuning",
    "half_life_days": "tuning",
    "exact": "tuning",
    "rerank": "tuning",
    "diversity": "tuning",
    "as_of": "curation",
}
_SEARCH_HINTS = {
    "query": "Words, a question or code.",
    "mode": "hybrid (keyword + semantic), semantic or keyword.",
    "types": "Kinds to search (default: all but code).",
    "scope": "Search `global` and this scope (episodes: this butler's).",
    "limit": "Most results, 1-100.",
    "context_window": "Episode hits: attach up to this many turns before and after, of the same session, "
    "as `context` (0-10).",
}
_RECALL_GATES: dict[str, Gate] = {
    "tenants": OPERATOR,
    "all_tenants": OPERATOR,
    "min_confidence": "tuning",
    "score_weights": "tuning",
    "as_of": "curation",
}


def _json(state: ServiceState, result: Timed) -> Response:
    # The service builds the documented shape itself (tests compare it with the response model);
    # re-validating it against the model on every response cost more than the fusion.
    # Phase timings are off by default: the embed phase told a tenant whether a query string was
    # already cached, i.e. searched recently (benchmarks turn them on with RECALLD_SERVER_TIMING).
    headers = {"Server-Timing": result.timings.header()} if state.settings.server_timing else None
    return Response(to_json(result.body), media_type="application/json", headers=headers)


async def _search(state: ServiceState, db: Database, who: Principal, args: SearchIn) -> Timed:
    return Timed(*await search_service.search(state, db, who, args.to_domain()))


async def _recall(state: ServiceState, db: Database, who: Principal, args: RecallIn) -> Timed:
    return Timed(*await recall_service.recall(state, db, who, args.to_domain()))


OPERATIONS = (
    Operation(
        "memory_search",
        "reader",
        SearchIn,
        SearchOut,
        _search,
        Rest(
            "POST",
            "/search",
            "Search memories (hybrid, semantic or keyword)",
            "Keyword (BM25) and vector retrieval, fused per query (`adaptive` by default); every result "
            "explains its score.",
            responses=_ERRORS,
            render=_json,
        ),
        Mcp(
            "Find stored memories (facts, rules, episodes, memory-file chunks) by meaning and keywords. "
            "Best first, each with its score, highlights and why it ranked there. With the default fusion "
            "the score is the estimated probability (0-1) that the result is relevant; when nothing "
            "stored is relevant the answer is empty with abstained: true (min_score: 0 gives the "
            "best-effort list).",
            "memory",
            "read",
            gated=_SEARCH_GATES,
            hints=_SEARCH_HINTS,
        ),
    ),
    Operation(
        "memory_recall",
        "reader",
        RecallIn,
        RecallOut,
        _recall,
        Rest(
            "POST",
            "/recall",
            "Recall facts and rules for a topic",
            "Composite score: relevance, importance, recency and effective confidence, each reported.",
            responses=_ERRORS,
            render=_json,
        ),
        Mcp(
            "The facts and rules to keep in mind for a topic, ranked by relevance, importance, recency "
            "and confidence. A memory whose relevance (the probability it is relevant) is below the "
            "floor is never recalled; nothing relevant answers an empty list with abstained: true.",
            "memory",
            "read",
            gated=_RECALL_GATES,
        ),
    ),
)

router = routes(OPERATIONS, prefix="/v1", tags=["retrieval"])
