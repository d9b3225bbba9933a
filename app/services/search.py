"""memory_search as a pipeline of named steps: open, plan, retrieve, cut, reorder, fetch, respond."""

from __future__ import annotations

import asyncio
import heapq
import time
import uuid
from typing import Any

import asyncpg

from app.auth import Principal
from app.errors import ApiError
from app.infra.db import Database
from app.repositories import memories as memory_repo
from app.repositories.search import CandidateFilter
from app.retrieval.fusion import Shares
from app.retrieval.globs import GlobError, glob_to_regex
from app.retrieval.highlights import highlight_spans
from app.retrieval.hits import Hit
from app.retrieval.query import ParsedQuery
from app.retrieval.scoring import temporal_decay, tie_break_key
from app.services import code_search
from app.services import rerank as rerank_service
from app.services.conversation import context_by_hit
from app.services.memories import memory_to_dict
from app.services.ranking import DEFAULT_KINDS, KEYWORD_RANKER, LEG_DEPTH, LegPlan, plan_legs, rank_candidates
from app.services.requests import SearchRequest
from app.services.retrieval_context import Asked, RetrievalContext, open_retrieval
from app.services.timings import Timings
from app.state import ServiceState


async def search(
    state: ServiceState, db: Database, principal: Principal, body: SearchRequest
) -> tuple[dict[str, Any], Timings]:
    """memory_search."""
    async with open_retrieval(
        state,
        db,
        principal,
        text=body.query,
        tenants=body.tenants,
        all_tenants=body.all_tenants,
        asked=_asked(body),
        embed=body.mode != "keyword",
    ) as ctx:
        if ctx.parsed.is_empty and not body.symbol:
            return _response(ctx, body), ctx.timings
        return await _ranked_response(ctx, db, body), ctx.timings


def _asked(body: SearchRequest) -> Asked:
    """The settings this search sets itself."""
    return Asked(
        scope=body.scope,
        fusion=body.fusion,
        weights=body.weights,
        code=body.types is not None and set(body.types) == {"code"},
        half_life_days=body.half_life_days,
        min_score=body.min_score,
        min_confidence=body.min_confidence,
        rerank=body.rerank,
        rerank_top_n=body.rerank_top_n,
        diversity=body.diversity,
    )


async def _ranked_response(ctx: RetrievalContext, db: Database, body: SearchRequest) -> dict[str, Any]:
    """The steps of a search with a query (or a symbol)."""
    async with db.transaction(ctx.tenant_ids, synchronous_commit=False) as conn:
        ctx = await ctx.with_scope(conn)
        plan = plan_legs(ctx.state, ctx.settings, query=ctx.parsed.text, mode=body.mode)
        f = _candidate_filter(body, ctx)
        fused, match_types, shares = await _retrieve(ctx, conn, f, plan, body)
        reorder_plan = rerank_service.ReorderPlan(
            rerank=ctx.settings.rerank, top_n=ctx.settings.rerank_top_n, diversity=ctx.settings.diversity
        )
        keep = max(body.limit, reorder_plan.top_n) if reorder_plan.active else body.limit
        cut, best = await _cut(ctx, conn, f, fused, match_types, body, keep + SPARE)
        scored = _distinct(cut, keep)
        head = scored[: reorder_plan.top_n] if reorder_plan.active else []
        texts = await rerank_service.load_texts(conn, ctx.tenant_ids, head, reorder_plan)
        if not reorder_plan.active:
            scored = scored[: body.limit]
            rows, context = await _fetch_shown(conn, ctx, scored, body)
    reordering: rerank_service.Reordering | None = None
    if reorder_plan.active:
        # A reranker endpoint may take seconds: no connection is held while it answers, so
        # searches that rerank cannot drain the pool that every tenant shares.
        started = time.perf_counter()
        reordering = await rerank_service.reorder(
            ctx.state.reranker,
            ctx.state.settings,
            body.query,
            head,
            texts,
            reorder_plan,
            await ctx.vector if ctx.vector is not None else None,
        )
        scored = ([head[i] for i in reordering.order] + scored[len(head) :])[: body.limit]
        ctx.timings.add("rerank", started)
        async with db.transaction(ctx.tenant_ids, synchronous_commit=False) as conn:
            rows, context = await _fetch_shown(conn, ctx, scored, body)
    shown = [(hit, row) for hit in scored if (row := rows.get(hit.id)) is not None]
    spans = await _highlights([row["content"] for _, row in shown], ctx.parsed)
    results = [
        _result(ctx, plan, shares, reordering, hit, row, highlights, context)
        for (hit, row), highlights in zip(shown, spans, strict=True)
    ]
    response = _response(ctx, body, results, await ctx.embedding_used(), reordering)
    # Candidates were found but none reached min_score: the answer is "nothing relevant", said so.
    response["abstained"] = bool(fused) and not scored
    response["best_score"] = round(best, 6) if best is not None else None
    return response


async def _retrieve(
    ctx: RetrievalContext, conn: asyncpg.Connection, f: CandidateFilter, plan: LegPlan, body: SearchRequest
) -> tuple[list[Hit], dict[str, str], Shares]:
    """The planned legs, fused; each leg's match type, and the weights fusion used."""
    if ctx.parsed.is_empty:
        return [], {}, Shares({})
    return await rank_candidates(
        ctx.state,
        conn,
        f=f,
        parsed=ctx.parsed,
        vector=ctx.vector,
        plan=plan,
        depth=LEG_DEPTH,
        min_similarity=body.min_similarity,
        timings=ctx.timings,
        force_exact=body.exact,
    )


async def _cut(
    ctx: RetrievalContext,
    conn: asyncpg.Connection,
    f: CandidateFilter,
    fused: list[Hit],
    match_types: dict[str, str],
    body: SearchRequest,
    keep: int,
) -> tuple[list[Hit], float | None]:
    """The hits decayed, expanded along code references when asked, at or above min_score, in the tie
    order; and the best score any fused hit reached after decay, shown or not (None: no hit)."""
    half_life = ctx.settings.half_life_days
    decays = [temporal_decay(hit.path, ctx.now, half_life) for hit in fused]
    scores = [hit.fused * decay for hit, decay in zip(fused, decays, strict=True)]
    best = max(scores, default=None)
    min_score = ctx.score_floor(calibrated=bool(fused) and fused[0].evidence is not None, best=best or 0.0)
    if not (body.symbol or body.depth):
        return _best(fused, scores, decays, match_types, min_score, keep), best
    # Code hops re-score and add candidates: every fused hit goes in.
    for hit, decay in zip(fused, decays, strict=True):
        _decayed(hit, decay, match_types)
    started = time.perf_counter()
    expanded = await code_search.expand(
        conn, ctx.principal.tenant_id, f, fused, symbol=body.symbol, depth=body.depth, seeds=body.limit
    )
    ctx.timings.add("code", started)
    # An exact symbol match is what was asked for: no floor drops it.
    scored = [hit for hit in expanded if hit.score >= min_score or hit.match_type == "symbol"]
    scored.sort(key=lambda hit: tie_break_key(hit.score, hit.created_at, hit.id))
    return scored, best


# Hits cut beyond `keep`, to fill the places of hidden duplicates.
SPARE = 5


def _distinct(hits: list[Hit], keep: int) -> list[Hit]:
    """The first `keep` hits, never two with the same normalised content (R-M7): the better one stays.

    The legs read each row's content key with the row, so this costs no round trip.
    """
    seen: set[bytes] = set()
    out: list[Hit] = []
    for hit in hits[: keep + SPARE]:
        key = hit.content_key
        if key is None or key not in seen:
            out.append(hit)
        if key is not None:
            seen.add(key)
    return out[:keep]


def _decayed(hit: Hit, decay: float, match_types: dict[str, str]) -> None:
    """A fused hit's final score, and its match type: the one leg that found it, else hybrid."""
    hit.decay = decay
    hit.score = hit.fused * decay
    found = hit.legs_found
    hit.match_type = match_types[found[0]] if len(found) == 1 else "hybrid"


def _best(
    fused: list[Hit],
    scores: list[float],
    decays: list[float],
    match_types: dict[str, str],
    min_score: float,
    keep: int,
) -> list[Hit]:
    """The first `keep` fused hits at or above min_score after decay, in the one tie order.

    A search fuses ~150 hits and shows 10: only hits scoring at least the keep-th best score can
    be among the first keep, so the tie order's key is made and the hit scored for those alone.
    """
    floor = min_score
    if len(scores) > keep:
        floor = max(floor, heapq.nlargest(keep, scores)[-1])
    chosen = [i for i, score in enumerate(scores) if score >= floor]
    chosen.sort(key=lambda i: tie_break_key(scores[i], fused[i].created_at, fused[i].id))
    for i in chosen[:keep]:
        _decayed(fused[i], decays[i], match_types)
    return [fused[i] for i in chosen[:keep]]


def _path_regex(field: str, glob: str | None) -> str | None:
    if not glob:
        return None
    try:
        return glob_to_regex(glob)
    except GlobError as exc:
        raise ApiError(422, "validation_error", f"{field}: {exc}") from exc


def _candidate_filter(body: SearchRequest, ctx: RetrievalContext) -> CandidateFilter:
    """Which rows the legs may return."""
    filters = body.filters
    return CandidateFilter(
        repository=body.repository,
        path_regex=_path_regex("file_filter", body.file_filter),
        exclude_path_regex=_path_regex("exclude_filter", body.exclude_filter),
        tenant_ids=ctx.tenant_ids,
        kinds=tuple(body.types) if body.types else DEFAULT_KINDS,
        scope=body.scope,
        min_confidence=ctx.settings.min_confidence,
        tags=filters.tags if filters else None,
        created_after=filters.created_after if filters else None,
        created_before=filters.created_before if filters else None,
        metadata=filters.metadata if filters else None,
        as_of=body.as_of,
    )


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
    conn: asyncpg.Connection, ctx: RetrievalContext, shown: list[Hit], body: SearchRequest
) -> tuple[dict[uuid.UUID, Any], dict[uuid.UUID, list[dict[str, Any]]]]:
    """The shown results' rows (their references bumped) and their conversation context."""
    started = time.perf_counter()
    rows = await memory_repo.bump_references(conn, tenant_ids=ctx.tenant_ids, ids=[hit.id for hit in shown])
    ctx.timings.add("fetch", started)
    context: dict[uuid.UUID, list[dict[str, Any]]] = {}
    if body.context_window:
        started = time.perf_counter()
        episodes = [i for i, r in rows.items() if r["kind"] == "episode" and r["session_id"] is not None]
        context = await context_by_hit(
            conn, tenant_ids=ctx.tenant_ids, episode_ids=episodes, window=body.context_window
        )
        ctx.timings.add("context", started)
    return rows, context


def _response(
    ctx: RetrievalContext,
    body: SearchRequest,
    results: list[dict[str, Any]] | None = None,
    embedding_used: bool = False,
    reordering: rerank_service.Reordering | None = None,
) -> dict[str, Any]:
    """The response body around the results."""
    response: dict[str, Any] = {
        "results": results or [],
        "mode": body.mode if ctx.state.embedder is not None else "keyword",
        "keyword_ranker": KEYWORD_RANKER,
        "embedding_used": embedding_used,
        "abstained": False,
        "best_score": None,
    }
    if reordering is not None and reordering.report is not None:
        response["rerank"] = reordering.report
    return response


def _result(
    ctx: RetrievalContext,
    plan: LegPlan,
    shares: Shares,
    reordering: rerank_service.Reordering | None,
    hit: Hit,
    row: Any,
    highlights: list[tuple[int, int]],
    context: dict[uuid.UUID, list[dict[str, Any]]],
) -> dict[str, Any]:
    """One result: the memory, its score and how it came about."""
    item = memory_to_dict(row, ctx.now)
    item["score"] = round(hit.score, 6)
    item["match_type"] = hit.match_type
    item["highlights"] = highlights
    breakdown: dict[str, Any] = {"fusion": plan.fusion, "decay": round(hit.decay, 6)}
    if hit.legs is not None:
        ranks = hit.ranks
        breakdown.update(
            fused=round(hit.fused, 6),
            ranks=ranks,
            raw_scores=hit.raw_scores,
            weights={leg: round(shares.weights[leg], 6) for leg in ranks},
        )
    if hit.evidence is not None:
        breakdown["calibration"] = {"adaptive": round(hit.adaptive, 6), **hit.evidence}
    if plan.skipped or shares.silenced:
        breakdown["legs_skipped"] = {**plan.skipped, **shares.silenced}
    if hit.hop_depth is not None:
        item["hop_depth"] = hit.hop_depth
        breakdown["paths"] = list(hit.paths)
    if reordering is not None:
        if hit.id in reordering.rerank:
            breakdown["rerank"] = reordering.rerank[hit.id]
        if hit.id in reordering.mmr:
            breakdown["mmr"] = reordering.mmr[hit.id]
    item["score_breakdown"] = breakdown
    if row["id"] in context:
        item["context"] = context[row["id"]]
    if len(ctx.tenant_ids) > 1:
        item["tenant_id"] = str(row["tenant_id"])
    return item
