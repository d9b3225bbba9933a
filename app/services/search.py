"""memory_search: run the legs, fuse, decay, expand code hops, filter, bump references."""

from __future__ import annotations

import asyncio
import heapq
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg

from app.auth import Principal
from app.db import Database
from app.embeddings.base import Vector
from app.errors import ApiError
from app.repositories import memories as memory_repo
from app.repositories.search import CandidateFilter
from app.retrieval import reorder as reorder_candidates
from app.retrieval.fusion import FusedHit
from app.retrieval.globs import GlobError, glob_to_regex
from app.retrieval.highlights import highlight_spans
from app.retrieval.query import ParsedQuery, parse_query
from app.retrieval.scoring import temporal_decay, tie_break_key
from app.services import code_search
from app.services import rerank as rerank_service
from app.services.code_search import Candidate
from app.services.conversation import context_by_hit
from app.services.memories import memory_to_dict
from app.services.query_embedding import embedding_used, query_embedding
from app.services.ranking import (
    DEFAULT_KINDS,
    KEYWORD_RANKER,
    LEG_DEPTH,
    RankedHit,
    plan_legs,
    rank_candidates,
    semantic_blind_spot,
)
from app.services.requests import SearchRequest
from app.services.scopes import load_scope_settings
from app.services.tenants import resolve_tenants
from app.services.timings import Timings
from app.state import ServiceState


def _match_type(hit: FusedHit, match_types: dict[str, str]) -> str:
    present = hit.legs_found
    if len(present) > 1:
        return "hybrid"
    return match_types[present[0]] if present else "hybrid"


def _candidate(r: RankedHit, score: float, decay: float, match_types: dict[str, str]) -> Candidate:
    return Candidate(
        id=r.hit.id,
        score=score,
        created_at=r.created_at,
        match_type=_match_type(r.hit, match_types),
        decay=decay,
        hit=r.hit,
    )


def _best_candidates(
    ranked: list[RankedHit],
    match_types: dict[str, str],
    now: datetime,
    half_life: float,
    min_score: float,
    keep: int,
) -> list[Candidate]:
    """The first `keep` fused hits at or above min_score after decay, in the one tie order.

    A search fuses ~150 hits and shows 10: only hits scoring at least the keep-th best score can
    be among the first keep, so the tie order's key and a Candidate are made for those alone.
    """
    decays = [temporal_decay(r.path, now, half_life) for r in ranked]
    scores = [r.hit.score * decay for r, decay in zip(ranked, decays, strict=True)]
    floor = min_score
    if len(scores) > keep:
        floor = max(floor, heapq.nlargest(keep, scores)[-1])
    chosen = [i for i, score in enumerate(scores) if score >= floor]
    chosen.sort(key=lambda i: tie_break_key(scores[i], ranked[i].created_at, ranked[i].hit.id))
    return [_candidate(ranked[i], scores[i], decays[i], match_types) for i in chosen[:keep]]


def _path_regex(field: str, glob: str | None) -> str | None:
    if not glob:
        return None
    try:
        return glob_to_regex(glob)
    except GlobError as exc:
        raise ApiError(422, "validation_error", f"{field}: {exc}") from exc


def _candidate_filter(body: SearchRequest, tenant_ids: list[str], min_confidence: float) -> CandidateFilter:
    filters = body.filters
    return CandidateFilter(
        repository=body.repository,
        path_regex=_path_regex("file_filter", body.file_filter),
        exclude_path_regex=_path_regex("exclude_filter", body.exclude_filter),
        tenant_ids=tenant_ids,
        kinds=tuple(body.types) if body.types else DEFAULT_KINDS,
        scope=body.scope,
        min_confidence=min_confidence,
        tags=filters.tags if filters else None,
        created_after=filters.created_after if filters else None,
        created_before=filters.created_before if filters else None,
        metadata=filters.metadata if filters else None,
    )


async def search(
    state: ServiceState, db: Database, principal: Principal, body: SearchRequest
) -> tuple[dict[str, Any], Timings]:
    """memory_search."""
    timings = Timings()
    total = time.perf_counter()
    tenant_ids = await resolve_tenants(db, principal, body.tenants, body.all_tenants)
    parsed = parse_query(body.query)
    if parsed.is_empty and not body.symbol:
        return _search_response(state, body), timings
    embed = (
        state.embedder is not None
        and body.mode != "keyword"
        and not parsed.is_empty
        and semantic_blind_spot(state, parsed.text) is None
    )
    async with query_embedding(
        state, parsed.text, timings, tenant_id=principal.tenant_id, wanted=embed
    ) as vector:
        response = await _ranked_response(state, db, principal, body, parsed, vector, tenant_ids, timings)
    timings.add("total", total)
    return response, timings


def _search_response(state: ServiceState, body: SearchRequest) -> dict[str, Any]:
    return {
        "results": [],
        "mode": body.mode if state.embedder is not None else "keyword",
        "keyword_ranker": KEYWORD_RANKER,
        "embedding_used": False,
    }


# Above this many characters of result text, highlighting (a stemmer call per candidate word)
# runs in a worker thread: a page of 64 KiB memories would otherwise hold the event loop.
HIGHLIGHT_INLINE_CHARS = 32 * 1024


async def _highlights(contents: list[str], parsed: ParsedQuery) -> list[list[tuple[int, int]]]:
    def spans() -> list[list[tuple[int, int]]]:
        return [highlight_spans(content, parsed) for content in contents]

    if sum(len(content) for content in contents) <= HIGHLIGHT_INLINE_CHARS:
        return spans()
    return await asyncio.to_thread(spans)


async def _fetch_shown(
    conn: asyncpg.Connection,
    tenant_ids: list[str],
    shown: list[Candidate],
    body: SearchRequest,
    timings: Timings,
) -> tuple[dict[uuid.UUID, Any], dict[uuid.UUID, list[dict[str, Any]]]]:
    """The shown results' rows (their references bumped) and their conversation context."""
    started = time.perf_counter()
    rows = await memory_repo.bump_references(
        conn, tenant_ids=tenant_ids, ids=[uuid.UUID(c.id) for c in shown]
    )
    timings.add("fetch", started)
    context: dict[uuid.UUID, list[dict[str, Any]]] = {}
    if body.context_window:
        started = time.perf_counter()
        episodes = [i for i, r in rows.items() if r["kind"] == "episode" and r["session_id"] is not None]
        context = await context_by_hit(
            conn, tenant_ids=tenant_ids, episode_ids=episodes, window=body.context_window
        )
        timings.add("context", started)
    return rows, context


async def _ranked_response(
    state: ServiceState,
    db: Database,
    principal: Principal,
    body: SearchRequest,
    parsed: ParsedQuery,
    vector: asyncio.Task[Vector | None] | None,
    tenant_ids: list[str],
    timings: Timings,
) -> dict[str, Any]:
    response = _search_response(state, body)
    now = datetime.now(UTC)
    min_confidence = body.min_confidence if body.min_confidence is not None else state.settings.min_confidence
    min_score = body.min_score if body.min_score is not None else state.settings.min_score
    async with db.transaction(tenant_ids, synchronous_commit=False) as conn:
        scope_settings = await load_scope_settings(conn, tenant_id=principal.tenant_id, scope=body.scope)
        plan = plan_legs(
            state,
            scope_settings,
            query=parsed.text,
            mode=body.mode,
            fusion=body.fusion,
            weights=body.weights,
            code=body.types is not None and set(body.types) == {"code"},
        )
        half_life = (
            body.half_life_days or scope_settings.half_life_days or state.settings.decay_half_life_days
        )
        f = _candidate_filter(body, tenant_ids, min_confidence)
        ranked: list[RankedHit] = []
        match_types: dict[str, str] = {}
        fusion_weights: dict[str, float] = {}
        if not parsed.is_empty:
            ranked, match_types, fusion_weights = await rank_candidates(
                state,
                conn,
                f=f,
                parsed=parsed,
                vector=vector,
                plan=plan,
                depth=LEG_DEPTH,
                min_similarity=body.min_similarity,
                timings=timings,
                force_exact=body.exact,
            )
        reorder_plan = rerank_service.plan_reorder(
            state.settings,
            scope_settings,
            rerank_requested=body.rerank,
            top_n=body.rerank_top_n,
            diversity=body.diversity,
        )
        if body.symbol or body.depth:
            # Code hops re-score and add candidates: every fused hit goes in.
            candidates = [
                _candidate(r, r.hit.score * decay, decay, match_types)
                for r in ranked
                for decay in (temporal_decay(r.path, now, half_life),)
            ]
            started = time.perf_counter()
            candidates = await code_search.expand(
                conn,
                principal.tenant_id,
                f,
                candidates,
                symbol=body.symbol,
                depth=body.depth,
                seeds=body.limit,
            )
            timings.add("code", started)
            scored = [c for c in candidates if c.score >= min_score]
            scored.sort(key=lambda c: tie_break_key(c.score, c.created_at, c.id))
        else:
            keep = max(body.limit, reorder_plan.top_n) if reorder_plan.active else body.limit
            scored = _best_candidates(ranked, match_types, now, half_life, min_score, keep)
        head = scored[: reorder_plan.top_n] if reorder_plan.active else []
        pool = [reorder_candidates.Candidate(c.id, c.score, c.created_at) for c in head]
        texts = await rerank_service.load_texts(conn, tenant_ids, pool, reorder_plan)
        if not reorder_plan.active:
            scored = scored[: body.limit]
            rows, context = await _fetch_shown(conn, tenant_ids, scored, body, timings)
    reordering: rerank_service.Reordering | None = None
    if reorder_plan.active:
        # A reranker endpoint may take seconds: no connection is held while it answers, so
        # searches that rerank cannot drain the pool that every tenant shares.
        started = time.perf_counter()
        reordering = await rerank_service.reorder(
            state.reranker,
            state.settings,
            body.query,
            pool,
            texts,
            reorder_plan,
            await vector if vector is not None else None,
        )
        scored = ([head[i] for i in reordering.order] + scored[len(head) :])[: body.limit]
        timings.add("rerank", started)
        async with db.transaction(tenant_ids, synchronous_commit=False) as conn:
            rows, context = await _fetch_shown(conn, tenant_ids, scored, body, timings)
    shown = [(c, row) for c in scored if (row := rows.get(uuid.UUID(c.id))) is not None]
    spans = await _highlights([row["content"] for _, row in shown], parsed)
    results = []
    for (c, row), highlights in zip(shown, spans, strict=True):
        item = memory_to_dict(row, now)
        item["score"] = round(c.score, 6)
        item["match_type"] = c.match_type
        item["highlights"] = highlights
        breakdown: dict[str, Any] = {"fusion": plan.fusion, "decay": round(c.decay, 6)}
        if c.hit is not None:
            ranks = c.hit.ranks
            breakdown.update(
                fused=round(c.hit.score, 6),
                ranks=ranks,
                raw_scores=c.hit.raw_scores,
                weights={leg: round(fusion_weights[leg], 6) for leg in ranks},
            )
        if plan.skipped:
            breakdown["legs_skipped"] = plan.skipped
        if c.hop_depth is not None:
            item["hop_depth"] = c.hop_depth
            breakdown["paths"] = c.paths
        if reordering is not None:
            if c.id in reordering.rerank:
                breakdown["rerank"] = reordering.rerank[c.id]
            if c.id in reordering.mmr:
                breakdown["mmr"] = reordering.mmr[c.id]
        item["score_breakdown"] = breakdown
        if row["id"] in context:
            item["context"] = context[row["id"]]
        if len(tenant_ids) > 1:
            item["tenant_id"] = str(row["tenant_id"])
        results.append(item)
    response["results"] = results
    response["embedding_used"] = await embedding_used(vector)
    if reordering is not None and reordering.report is not None:
        response["rerank"] = reordering.report
    return response
