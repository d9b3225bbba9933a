"""memory_recall: hybrid relevance over facts and rules, combined with importance, recency and confidence."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from app.auth import Principal
from app.db import Database
from app.embeddings.base import Vector
from app.repositories import memories as memory_repo
from app.repositories.search import CandidateFilter
from app.retrieval.query import ParsedQuery, parse_query
from app.retrieval.scoring import (
    DEFAULT_RECALL_WEIGHTS,
    RecallWeights,
    effective_confidence,
    recall_score,
    recency_score,
    tie_break_key,
)
from app.services.memories import memory_to_dict
from app.services.query_embedding import embedding_used, query_embedding
from app.services.ranking import (
    plan_legs,
    rank_candidates,
    semantic_blind_spot,
)
from app.services.requests import RecallRequest
from app.services.scopes import ScopeSettings, load_scope_settings
from app.services.tenants import resolve_tenants
from app.services.timings import Timings
from app.state import ServiceState


async def recall(
    state: ServiceState, db: Database, principal: Principal, body: RecallRequest
) -> tuple[dict[str, Any], Timings]:
    """memory_recall: hybrid relevance over facts and rules, combined with importance, recency, confidence."""
    timings = Timings()
    total = time.perf_counter()
    tenant_ids = await resolve_tenants(db, principal, body.tenants, body.all_tenants)
    parsed = parse_query(body.topic)
    wanted = not parsed.is_empty and semantic_blind_spot(state, parsed.text) is None
    async with query_embedding(
        state, parsed.text, timings, tenant_id=principal.tenant_id, wanted=wanted
    ) as vector:
        response = await _recall_in_transaction(
            state, db, principal, body, parsed, vector, tenant_ids, timings
        )
    timings.add("total", total)
    return response, timings


async def _recall_in_transaction(
    state: ServiceState,
    db: Database,
    principal: Principal,
    body: RecallRequest,
    parsed: ParsedQuery,
    vector: asyncio.Task[Vector | None] | None,
    tenant_ids: list[str],
    timings: Timings,
) -> dict[str, Any]:
    now = datetime.now(UTC)
    min_confidence = body.min_confidence if body.min_confidence is not None else state.settings.min_confidence
    response: dict[str, Any] = {"results": [], "weights": {}, "embedding_used": False}
    async with db.transaction(tenant_ids, synchronous_commit=False) as conn:
        scope_settings = await load_scope_settings(conn, tenant_id=principal.tenant_id, scope=body.scope)
        weights = _recall_weights(body, scope_settings)
        response["weights"] = {
            "relevance": weights.relevance,
            "importance": weights.importance,
            "recency": weights.recency,
            "confidence": weights.confidence,
        }
        if parsed.is_empty:
            return response
        plan = plan_legs(
            state, scope_settings, query=parsed.text, mode="hybrid", fusion=None, weights=None, code=False
        )
        # Relevance ranks a wider pool than `limit`: importance and recency may lift a lower hit.
        pool = min(max(body.limit * 5, 50), 200)
        f = CandidateFilter(
            tenant_ids=tenant_ids, kinds=("fact", "rule"), scope=body.scope, min_confidence=min_confidence
        )
        ranked, _, _ = await rank_candidates(
            state,
            conn,
            f=f,
            parsed=parsed,
            vector=vector,
            plan=plan,
            depth=pool,
            min_similarity=None,
            timings=timings,
        )
        started = time.perf_counter()
        signals = await memory_repo.recall_signals(
            conn, tenant_ids=tenant_ids, ids=[uuid.UUID(r.hit.id) for r in ranked]
        )
        timings.add("fetch", started)
        recency_half_life = scope_settings.recency_half_life_days or state.settings.recency_half_life_days
        scored = []
        for r in ranked:
            signal = signals.get(uuid.UUID(r.hit.id))
            if signal is None:
                continue
            conf = effective_confidence(signal.confidence, signal.decay_rate, signal.last_confirmed_at, now)
            rec = recency_score(signal.last_referenced_at, signal.created_at, now, recency_half_life)
            final = recall_score(
                weights, relevance=r.hit.score, importance=signal.importance, recency=rec, confidence=conf
            )
            scored.append((final, r, conf, rec))
        scored.sort(key=lambda item: tie_break_key(item[0], item[1].created_at, item[1].hit.id))
        scored = scored[: body.limit]
        started = time.perf_counter()
        bumped = await memory_repo.bump_references(
            conn, tenant_ids=tenant_ids, ids=[uuid.UUID(item[1].hit.id) for item in scored]
        )
        timings.add("fetch", started)
    results = []
    for final, r, conf, rec in scored:
        row = bumped.get(uuid.UUID(r.hit.id))
        if row is None:
            continue
        item = memory_to_dict(row, now)
        item.update(
            score=round(final, 6),
            relevance=round(r.hit.score, 6),
            importance=row["importance"],
            recency=round(rec, 6),
            effective_confidence=round(conf, 6),
        )
        results.append(item)
    response["results"] = results
    response["embedding_used"] = await embedding_used(vector)
    return response


def _recall_weights(body: RecallRequest, scope_settings: ScopeSettings) -> RecallWeights:
    base = scope_settings.score_weights
    weights = base.weights() if base else DEFAULT_RECALL_WEIGHTS
    override = body.score_weights
    if override is None:
        return weights
    return RecallWeights(
        relevance=override.relevance if override.relevance is not None else weights.relevance,
        importance=override.importance if override.importance is not None else weights.importance,
        recency=override.recency if override.recency is not None else weights.recency,
        confidence=override.confidence if override.confidence is not None else weights.confidence,
    )
