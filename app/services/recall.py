"""memory_recall: hybrid relevance over facts and rules, combined with importance, recency and confidence."""

from __future__ import annotations

import time
from typing import Any

import asyncpg

from app.auth import Principal
from app.infra.db import Database
from app.repositories import memories as memory_repo
from app.repositories.search import CandidateFilter
from app.retrieval.hits import Hit
from app.retrieval.scoring import effective_confidence, recall_score, recency_score, tie_break_key
from app.services.memories import memory_to_dict
from app.services.ranking import plan_legs, rank_candidates
from app.services.requests import RecallRequest
from app.services.retrieval_context import Asked, RetrievalContext, open_retrieval
from app.services.timings import Timings
from app.state import ServiceState

# (final score, hit, effective confidence, recency)
_Scored = tuple[float, Hit, float, float]


async def recall(
    state: ServiceState, db: Database, principal: Principal, body: RecallRequest
) -> tuple[dict[str, Any], Timings]:
    """memory_recall: hybrid relevance over facts and rules, combined with importance, recency, confidence."""
    asked = Asked(scope=body.scope, min_confidence=body.min_confidence, score_weights=body.score_weights)
    async with open_retrieval(
        state,
        db,
        principal,
        text=body.topic,
        tenants=body.tenants,
        all_tenants=body.all_tenants,
        asked=asked,
        embed=True,
    ) as ctx:
        return await _recall(ctx, db, body), ctx.timings


async def _recall(ctx: RetrievalContext, db: Database, body: RecallRequest) -> dict[str, Any]:
    """The steps of a recall: settings, relevance over a wide pool, the composite score, fetch."""
    async with db.transaction(ctx.tenant_ids, synchronous_commit=False) as conn:
        ctx = await ctx.with_scope(conn)
        weights = ctx.settings.recall_weights
        response: dict[str, Any] = {
            "results": [],
            "weights": {
                "relevance": weights.relevance,
                "importance": weights.importance,
                "recency": weights.recency,
                "confidence": weights.confidence,
            },
            "embedding_used": False,
            "abstained": False,
            "best_score": None,
        }
        if ctx.parsed.is_empty:
            return response
        found = await _relevance(ctx, conn, body)
        # A calibrated relevance below the floor is not recalled, however important, recent or
        # confident the memory is: those signals order what is relevant, they do not make it so.
        # (So recall keeps the floor itself where search, once answered, relaxes it relative to the
        # best result: here importance could lift a weak memory above the answer.)
        calibrated = bool(found) and found[0].evidence is not None
        floor = ctx.score_floor(calibrated=True) if calibrated else 0.0
        fused = [hit for hit in found if hit.fused >= floor]
        response["abstained"] = bool(found) and not fused
        response["best_score"] = round(max(hit.fused for hit in found), 6) if found else None
        scored = (await _composite(ctx, conn, fused))[: body.limit]
        started = time.perf_counter()
        bumped = await memory_repo.bump_references(
            conn, tenant_ids=ctx.tenant_ids, ids=[item[1].id for item in scored]
        )
        ctx.timings.add("fetch", started)
    results = []
    for final, hit, conf, rec in scored:
        row = bumped.get(hit.id)
        if row is None:
            continue
        item = memory_to_dict(row, ctx.now)
        item.update(
            score=round(final, 6),
            relevance=round(hit.fused, 6),
            importance=row["importance"],
            recency=round(rec, 6),
            effective_confidence=round(conf, 6),
        )
        results.append(item)
    response["results"] = results
    response["embedding_used"] = await ctx.embedding_used()
    return response


async def _relevance(ctx: RetrievalContext, conn: asyncpg.Connection, body: RecallRequest) -> list[Hit]:
    """Facts and rules of the scope ranked by hybrid relevance, over a pool wider than `limit`."""
    plan = plan_legs(ctx.state, ctx.settings, query=ctx.parsed.text, mode="hybrid")
    # Relevance ranks a wider pool than `limit`: importance and recency may lift a lower hit.
    pool = min(max(body.limit * 5, 50), 200)
    f = CandidateFilter(
        tenant_ids=ctx.tenant_ids,
        kinds=("fact", "rule"),
        scope=body.scope,
        min_confidence=ctx.settings.min_confidence,
        as_of=body.as_of,
    )
    fused, _, _ = await rank_candidates(
        ctx.state,
        conn,
        f=f,
        parsed=ctx.parsed,
        vector=ctx.vector,
        plan=plan,
        depth=pool,
        min_similarity=None,
        timings=ctx.timings,
    )
    return fused


async def _composite(ctx: RetrievalContext, conn: asyncpg.Connection, fused: list[Hit]) -> list[_Scored]:
    """Relevance combined with importance, recency and confidence, best first."""
    started = time.perf_counter()
    signals = await memory_repo.recall_signals(conn, tenant_ids=ctx.tenant_ids, ids=[hit.id for hit in fused])
    ctx.timings.add("fetch", started)
    weights, now = ctx.settings.recall_weights, ctx.now
    scored = []
    for hit in fused:
        signal = signals.get(hit.id)
        if signal is None:
            continue
        conf = effective_confidence(signal.confidence, signal.decay_rate, signal.last_confirmed_at, now)
        rec = recency_score(
            signal.last_referenced_at, signal.created_at, now, ctx.settings.recency_half_life_days
        )
        final = recall_score(
            weights, relevance=hit.fused, importance=signal.importance, recency=rec, confidence=conf
        )
        scored.append((final, hit, conf, rec))
    scored.sort(key=lambda item: tie_break_key(item[0], item[1].created_at, item[1].id))
    # Never the same words twice in one answer (R-M7): the better-scored memory stands for both.
    seen: set[bytes] = set()
    distinct = []
    for item in scored:
        key = signals[item[1].id].content_key
        if key is None or key not in seen:
            distinct.append(item)
        if key is not None:
            seen.add(key)
    return distinct
