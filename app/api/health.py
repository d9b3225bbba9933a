"""Liveness, readiness and metrics (no auth: probes and scrapers carry no keys)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.api.deps import StateDep
from app.infra.db import acquire
from app.infra.migrate import current_revision, head_revision
from app.metrics import observe_pool
from app.services.ranking import KEYWORD_RANKER

router = APIRouter(tags=["health"])

# Probes time out after a few seconds; answering 503 before that says more than a timeout.
READINESS_TIMEOUT_SECONDS = 2.0


_READY_EXAMPLE: dict[str, Any] = {
    "status": "ready",
    "checks": {
        "database": "ok",
        "migrations": {"current": "0003_code", "head": "0003_code"},
        "embedder": {
            "provider": "local",
            "model": "all-MiniLM-L6-v2",
            "dim": 384,
            "runtime": "onnx",
            "loaded": True,
        },
        "keyword_ranker": "bm25",
    },
}


@router.get(
    "/healthz",
    summary="Process is up",
    operation_id="healthz",
    responses={
        200: {"content": {"application/json": {"example": {"status": "ok"}}}},
        503: {
            "description": "The embedded PostgreSQL is down and being restarted; a supervisor may "
            "restart recalld if this persists.",
            "content": {"application/json": {"example": {"status": "embedded_database_down"}}},
        },
    },
)
async def healthz(state: StateDep) -> JSONResponse:
    """Answers while the process serves HTTP and, in embedded mode, its PostgreSQL runs."""
    if state.supervisor is not None and not state.supervisor.running:
        return JSONResponse({"status": "embedded_database_down"}, status_code=503)
    return JSONResponse({"status": "ok"})


@router.get(
    "/readyz",
    summary="Ready to serve",
    operation_id="readyz",
    responses={
        200: {
            "description": "Ready; `checks.keyword_ranker` says which keyword ranker is active; while an "
            "embedding model switch runs, `checks.embedding_switch` shows its progress (done/total, "
            "rate_per_second, eta_seconds).",
            "content": {"application/json": {"example": _READY_EXAMPLE}},
        },
        503: {
            "description": "Not ready; `checks` says which part failed.",
            "content": {
                "application/json": {
                    "example": {
                        **_READY_EXAMPLE,
                        "status": "not_ready",
                        "checks": {
                            **_READY_EXAMPLE["checks"],
                            "database": "unreachable: ConnectionRefusedError",
                        },
                    }
                }
            },
        },
    },
)
async def readyz(state: StateDep) -> JSONResponse:
    """Database reachable, schema at head, embedder loaded, and which keyword ranker is active."""
    checks: dict[str, Any] = {}
    ready = True
    try:
        async with acquire(state.check_pool, READINESS_TIMEOUT_SECONDS) as conn:
            revision = await current_revision(conn)
        checks["database"] = "ok"
        checks["migrations"] = {"current": revision, "head": head_revision()}
        ready = ready and revision == head_revision()
    except Exception as exc:
        checks["database"] = f"unreachable: {type(exc).__name__}"
        ready = False
    embedder = state.embedder
    checks["embedder"] = (
        {"provider": "none", "loaded": False}
        if embedder is None
        else {
            "provider": embedder.identity.provider,
            "model": embedder.identity.model,
            "dim": embedder.identity.dim,
            "runtime": embedder.runtime,
            "loaded": True,
        }
    )
    checks["keyword_ranker"] = KEYWORD_RANKER
    if state.embedding_switch is not None:
        # Ready throughout: the service answers from the old vectors until the cut-over.
        checks["embedding_switch"] = state.embedding_switch
    body = {"status": "ready" if ready else "not_ready", "checks": checks}
    return JSONResponse(body, status_code=200 if ready else 503)


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    operation_id="metrics",
    response_class=Response,
    responses={
        200: {
            "description": "Prometheus text format.",
            "content": {
                "text/plain": {
                    "example": 'recalld_request_seconds_count{method="POST",route="/v1/search",status="200"} 42.0\n'
                    'recalld_search_leg_seconds_sum{leg="semantic"} 0.31\n'
                    'recalld_embedding_seconds_count{kind="query"} 42.0\n'
                    'recalld_pool_connections{state="in_use"} 1.0\n'
                }
            },
        }
    },
)
async def metrics(state: StateDep) -> Response:
    """Request latency per route, search leg timings, embedding time, pool usage."""
    observe_pool(state.pool)
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
