"""memory_search and memory_recall: run the legs, fuse, decay, filter, bump references."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg

from app.api.schemas import RecallIn, SearchIn
from app.auth import Principal
from app.db import tenant_transaction
from app.embeddings.base import Vector
from app.errors import ApiError
from app.metrics import EMBEDDING_LATENCY, SEARCH_LEG_LATENCY
from app.repositories import memories as memory_repo
from app.repositories import search as search_repo
from app.repositories.search import CandidateFilter, LegRow
from app.repositories.tenants import get_tenants_by_names, list_tenants
from app.retrieval.fusion import FusedHit, LegHit, fuse_rrf, fuse_weighted, map_keyword_score
from app.retrieval.globs import glob_to_regex
from app.retrieval.highlights import highlight_spans
from app.retrieval.query import ParsedQuery, ilike_patterns, parse_query
from app.retrieval.scoring import (
    RecallWeights,
    effective_confidence,
    recall_score,
    recency_score,
    temporal_decay,
    tie_break_key,
)
from app.services import code_search
from app.services.code_search import Candidate
from app.services.memories import memory_to_dict
from app.services.scopes import ScopeSettings, load_scope_settings
from app.state import ServiceState

DEFAULT_KINDS = ("fact", "rule", "episode", "document")
# BM25 (k1 1.2, b 0.75) over per-tenant postings: the same ranker on every PostgreSQL.
KEYWORD_RANKER = "bm25"
SIZE_CACHE_SECONDS = 30.0
# Substring matches are weak evidence: they count at most half of a keyword hit.
SUBSTRING_SCORE_SCALE = 0.5
# BM25 ranks this many postings candidates per wanted row before the memory filters apply; most
# searches filter little, so the full ranking is only needed when the filters are selective.
KEYWORD_CANDIDATE_FACTOR = 5
# HNSW visits ~limit/share tuples at a few times the cost of an exact scan's row (see
# _use_exact_scan); measured on the bench's S1/S2 data, docs/benchmarks.md.
EXACT_SCAN_COST_RATIO = 5
KEYWORD_MIN_CANDIDATES = 200


@dataclass(slots=True)
class Timings:
    """Server-side time per phase, reported in the Server-Timing header."""

    spans: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, started: float) -> None:
        """Record the time since `started` (perf_counter) under name."""
        elapsed = time.perf_counter() - started
        self.spans[name] = self.spans.get(name, 0.0) + elapsed
        if name in ("semantic", "keyword"):
            SEARCH_LEG_LATENCY.labels(name).observe(elapsed)

    def header(self) -> str:
        """Server-Timing header value."""
        return ", ".join(f"{name};dur={seconds * 1000:.2f}" for name, seconds in self.spans.items())


@dataclass(frozen=True, slots=True)
class RankedHit:
    """A fused candidate with what ordering and display need."""

    hit: FusedHit
    created_at: datetime
    path: str | None


@dataclass(frozen=True, slots=True)
class LegPlan:
    """What to run: which legs, with which weights and fusion."""

    semantic: bool
    keyword: bool
    fusion: str
    weights: dict[str, float]
    k: int


async def resolve_tenants(
    conn: asyncpg.Connection, principal: Principal, tenants: list[str] | None, all_tenants: bool
) -> list[str]:
    """The caller's tenant, or, for operator keys that ask for it, the requested tenants."""
    if not tenants and not all_tenants:
        return [principal.tenant_id]
    if not principal.operator:
        raise ApiError(403, "forbidden", "cross-tenant retrieval needs an operator key")
    if all_tenants:
        return [t.id for t in await list_tenants(conn)]
    assert tenants is not None
    found = await get_tenants_by_names(conn, names=tenants)
    missing = sorted(set(tenants) - {t.name for t in found})
    if missing:
        raise ApiError(404, "not_found", f"unknown tenant {missing[0]}", {"missing": missing})
    return [t.id for t in found]


def _plan(state: ServiceState, body: SearchIn, scope_settings: ScopeSettings, *, code: bool) -> LegPlan:
    s = state.settings
    embedder_ok = state.embedder is not None
    semantic = embedder_ok and body.mode in ("hybrid", "semantic")
    keyword = body.mode in ("hybrid", "keyword") or not embedder_ok
    fusion: str = body.fusion
    if body.fusion == "rrf" and scope_settings.fusion and "fusion" not in body.model_fields_set:
        fusion = scope_settings.fusion
    if fusion == "weighted":
        defaults = {"semantic": s.weighted_vector_weight, "keyword": s.weighted_keyword_weight}
    elif code:
        defaults = {"semantic": s.code_semantic_weight, "keyword": s.code_keyword_weight}
    else:
        defaults = {"semantic": s.semantic_weight, "keyword": s.keyword_weight}
    k = s.rrf_k
    scoped = scope_settings.fusion_weights
    if scoped is not None:
        defaults = {
            "semantic": scoped.semantic if scoped.semantic is not None else defaults["semantic"],
            "keyword": scoped.keyword if scoped.keyword is not None else defaults["keyword"],
        }
        k = scoped.k or k
    if body.weights is not None:
        if body.weights.semantic is not None:
            defaults["semantic"] = body.weights.semantic
        if body.weights.keyword is not None:
            defaults["keyword"] = body.weights.keyword
        k = body.weights.k or k
    return LegPlan(semantic=semantic, keyword=keyword, fusion=fusion, weights=defaults, k=k)


async def _use_exact_scan(
    state: ServiceState, conn: asyncpg.Connection, tenant_ids: Sequence[str], limit: int
) -> bool:
    """Exact scan or HNSW for the semantic leg, by their costs for this tenant.

    An exact scan costs about one unit per tenant row; HNSW filtered to the tenant visits about
    limit / share tuples, each a few times dearer (a heap check for the filter). Exact wins while
    rows² ≤ EXACT_SCAN_COST_RATIO · limit · table rows, and always below exact_scan_max_rows.
    """
    key = ",".join(sorted(tenant_ids))
    cached = state.tenant_sizes.get(key)
    now = time.monotonic()
    if cached is not None and now - cached[0] < SIZE_CACHE_SECONDS:
        rows, total = cached[1], cached[2]
    else:
        rows, total = await memory_repo.embedded_row_counts(conn, tenant_ids=tenant_ids)
        state.tenant_sizes[key] = (now, rows, total)
    if rows <= state.settings.exact_scan_max_rows:
        return True
    return rows * rows <= EXACT_SCAN_COST_RATIO * limit * total


async def _keyword_stats(
    state: ServiceState, conn: asyncpg.Connection, tenant_ids: Sequence[str]
) -> tuple[int, float]:
    key = "stats:" + ",".join(sorted(tenant_ids))
    cached = state.keyword_stats.get(key)
    now = time.monotonic()
    if cached is not None and now - cached[0] < SIZE_CACHE_SECONDS:
        return cached[1], cached[2]
    n, avgdl = await memory_repo.keyword_corpus_stats(conn, tenant_ids=tenant_ids)
    state.keyword_stats[key] = (now, n, avgdl)
    return n, avgdl


async def run_keyword_leg(
    state: ServiceState, conn: asyncpg.Connection, f: CandidateFilter, parsed: ParsedQuery, limit: int
) -> tuple[list[LegRow], str]:
    """BM25 over the tenant's postings, else the substring tier; returns rows and their match type."""
    query_text = " ".join((*parsed.words, *parsed.cjk_bigrams))
    if query_text:
        n, avgdl = await _keyword_stats(state, conn, f.tenant_ids)
        cut: int | None = max(limit * KEYWORD_CANDIDATE_FACTOR, KEYWORD_MIN_CANDIDATES)
        while True:
            found = await search_repo.search_by_bm25(
                conn,
                f=f,
                query_text=query_text,
                corpus_size=n,
                avg_doc_length=avgdl,
                limit=limit,
                candidates=cut,
            )
            # Filters (kind, scope, tags…) apply after the cut: when they left too few, rank everything.
            if len(found.rows) >= limit or not found.truncated or cut is None:
                break
            cut = None
        if found.rows:
            return [
                LegRow(r.id, map_keyword_score(r.score), r.created_at, r.path) for r in found.rows
            ], "bm25"
    patterns = ilike_patterns(parsed)
    if not patterns:
        return [], "fulltext"
    rows = await search_repo.search_by_substring(conn, f=f, patterns=patterns, limit=limit)
    return [LegRow(r.id, r.score * SUBSTRING_SCORE_SCALE, r.created_at, r.path) for r in rows], "fulltext"


async def rank_candidates(
    state: ServiceState,
    conn: asyncpg.Connection,
    *,
    f: CandidateFilter,
    parsed: ParsedQuery,
    vector: Vector | None,
    plan: LegPlan,
    limit: int,
    min_similarity: float | None,
    timings: Timings,
    force_exact: bool = False,
) -> tuple[list[RankedHit], dict[str, str]]:
    """Run the planned legs inside the open tenant transaction and fuse them."""
    legs: dict[str, list[LegRow]] = {}
    match_types: dict[str, str] = {}
    if plan.keyword:
        started = time.perf_counter()
        legs["keyword"], match_types["keyword"] = await run_keyword_leg(state, conn, f, parsed, limit)
        timings.add("keyword", started)
    if plan.semantic and vector is not None:
        started = time.perf_counter()
        exact = force_exact or await _use_exact_scan(state, conn, f.tenant_ids, limit)
        legs["semantic"] = await search_repo.search_by_vector(
            conn, f=f, query_vector=vector, limit=limit, exact=exact, min_similarity=min_similarity
        )
        match_types["semantic"] = "semantic"
        timings.add("semantic", started)
    started = time.perf_counter()
    leg_hits = {name: [LegHit(str(r.id), r.score) for r in rows] for name, rows in legs.items()}
    weights = {name: plan.weights[name] for name in leg_hits}
    if plan.fusion == "weighted":
        fused = fuse_weighted(leg_hits, weights)
    else:
        fused = fuse_rrf(leg_hits, weights, k=plan.k, limit=limit)
    info = {str(r.id): r for rows in legs.values() for r in rows}
    ranked = [RankedHit(h, info[h.id].created_at, info[h.id].path) for h in fused]
    timings.add("fuse", started)
    return ranked, match_types


def _match_type(hit: FusedHit, match_types: dict[str, str]) -> str:
    present = [leg for leg, rank in hit.ranks.items() if rank is not None]
    if len(present) > 1:
        return "hybrid"
    return match_types[present[0]] if present else "hybrid"


def _candidate_filter(body: SearchIn, tenant_ids: list[str], min_confidence: float) -> CandidateFilter:
    filters = body.filters
    return CandidateFilter(
        repository=body.repository,
        path_regex=glob_to_regex(body.file_filter) if body.file_filter else None,
        exclude_path_regex=glob_to_regex(body.exclude_filter) if body.exclude_filter else None,
        tenant_ids=tenant_ids,
        kinds=tuple(body.types) if body.types else DEFAULT_KINDS,
        scope=body.scope,
        min_confidence=min_confidence,
        tags=filters.tags if filters else None,
        created_after=filters.created_after if filters else None,
        created_before=filters.created_before if filters else None,
        metadata=filters.metadata if filters else None,
    )


async def _embed_query(state: ServiceState, text: str, timings: Timings) -> Vector | None:
    if state.embedder is None:
        return None
    started = time.perf_counter()
    vector = await state.embedder.embed_query(text)
    EMBEDDING_LATENCY.labels("query").observe(time.perf_counter() - started)
    timings.add("embed", started)
    return vector


async def search(
    state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: SearchIn
) -> tuple[dict[str, Any], Timings]:
    """memory_search."""
    timings = Timings()
    total = time.perf_counter()
    tenant_ids = await resolve_tenants(conn, principal, body.tenants, body.all_tenants)
    parsed = parse_query(body.query)
    embedding_used = state.embedder is not None and body.mode != "keyword"
    response: dict[str, Any] = {
        "results": [],
        "mode": body.mode if state.embedder is not None else "keyword",
        "keyword_ranker": KEYWORD_RANKER,
        "embedding_used": False,
    }
    if parsed.is_empty and not body.symbol:
        return response, timings
    vector = (
        await _embed_query(state, parsed.text, timings) if embedding_used and not parsed.is_empty else None
    )
    response["embedding_used"] = vector is not None
    now = datetime.now(UTC)
    min_confidence = body.min_confidence if body.min_confidence is not None else state.settings.min_confidence
    min_score = body.min_score if body.min_score is not None else state.settings.min_score
    async with tenant_transaction(conn, tenant_ids, durable=False):
        scope_settings = await load_scope_settings(conn, tenant_id=principal.tenant_id, scope=body.scope)
        plan = _plan(state, body, scope_settings, code=body.types is not None and set(body.types) == {"code"})
        half_life = (
            body.half_life_days or scope_settings.half_life_days or state.settings.decay_half_life_days
        )
        f = _candidate_filter(body, tenant_ids, min_confidence)
        ranked: list[RankedHit] = []
        match_types: dict[str, str] = {}
        if not parsed.is_empty:
            ranked, match_types = await rank_candidates(
                state,
                conn,
                f=f,
                parsed=parsed,
                vector=vector,
                plan=plan,
                limit=body.limit,
                min_similarity=body.min_similarity,
                timings=timings,
                force_exact=body.exact,
            )
        candidates = [
            Candidate(
                id=r.hit.id,
                score=r.hit.score * temporal_decay(r.path, now, half_life),
                created_at=r.created_at,
                match_type=_match_type(r.hit, match_types),
                decay=temporal_decay(r.path, now, half_life),
                hit=r.hit,
            )
            for r in ranked
        ]
        if body.symbol or body.depth:
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
        scored = scored[: body.limit]
        started = time.perf_counter()
        rows = await memory_repo.bump_references(
            conn, tenant_ids=tenant_ids, ids=[uuid.UUID(c.id) for c in scored]
        )
        timings.add("fetch", started)
    results = []
    for c in scored:
        row = rows.get(uuid.UUID(c.id))
        if row is None:
            continue  # deleted between ranking and bump: nothing to show
        item = memory_to_dict(row, now)
        item["score"] = round(c.score, 6)
        item["match_type"] = c.match_type
        item["highlights"] = highlight_spans(row["content"], parsed)
        breakdown: dict[str, Any] = {"fusion": plan.fusion, "decay": round(c.decay, 6)}
        if c.hit is not None:
            breakdown.update(
                fused=round(c.hit.score, 6),
                ranks=c.hit.ranks,
                raw_scores=c.hit.raw_scores,
                weights={leg: plan.weights[leg] for leg in c.hit.ranks},
            )
        if c.hop_depth is not None:
            item["hop_depth"] = c.hop_depth
            breakdown["paths"] = c.paths
        item["score_breakdown"] = breakdown
        if len(tenant_ids) > 1:
            item["tenant_id"] = str(row["tenant_id"])
        results.append(item)
    response["results"] = results
    timings.add("total", total)
    return response, timings


async def recall(
    state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: RecallIn
) -> tuple[dict[str, Any], Timings]:
    """memory_recall: hybrid relevance over facts and rules, combined with importance, recency, confidence."""
    timings = Timings()
    total = time.perf_counter()
    tenant_ids = await resolve_tenants(conn, principal, body.tenants, body.all_tenants)
    parsed = parse_query(body.topic)
    now = datetime.now(UTC)
    min_confidence = body.min_confidence if body.min_confidence is not None else state.settings.min_confidence
    response: dict[str, Any] = {"results": [], "weights": {}, "embedding_used": False}
    vector = await _embed_query(state, parsed.text, timings) if not parsed.is_empty else None
    response["embedding_used"] = vector is not None
    async with tenant_transaction(conn, tenant_ids, durable=False):
        scope_settings = await load_scope_settings(conn, tenant_id=principal.tenant_id, scope=body.scope)
        weights = _recall_weights(body, scope_settings)
        response["weights"] = {
            "relevance": weights.relevance,
            "importance": weights.importance,
            "recency": weights.recency,
            "confidence": weights.confidence,
        }
        if parsed.is_empty:
            return response, timings
        search_body = SearchIn(query=body.topic, scope=body.scope, types=["fact", "rule"])
        plan = _plan(state, search_body, scope_settings, code=False)
        # Relevance ranks a wider pool than `limit`: importance and recency may lift a lower hit.
        pool = min(max(body.limit * 5, 50), 200)
        f = CandidateFilter(
            tenant_ids=tenant_ids, kinds=("fact", "rule"), scope=body.scope, min_confidence=min_confidence
        )
        ranked, _ = await rank_candidates(
            state,
            conn,
            f=f,
            parsed=parsed,
            vector=vector,
            plan=plan,
            limit=pool,
            min_similarity=None,
            timings=timings,
        )
        rows = await memory_repo.fetch_memories(
            conn, tenant_ids=tenant_ids, ids=[uuid.UUID(r.hit.id) for r in ranked]
        )
        recency_half_life = scope_settings.recency_half_life_days or state.settings.recency_half_life_days
        scored = []
        for r in ranked:
            row = rows.get(uuid.UUID(r.hit.id))
            if row is None:
                continue
            conf = effective_confidence(row["confidence"], row["decay_rate"], row["last_confirmed_at"], now)
            rec = recency_score(row["last_referenced_at"], row["created_at"], now, recency_half_life)
            final = recall_score(
                weights, relevance=r.hit.score, importance=row["importance"], recency=rec, confidence=conf
            )
            scored.append((final, r, conf, rec))
        scored.sort(key=lambda item: tie_break_key(item[0], item[1].created_at, item[1].hit.id))
        scored = scored[: body.limit]
        bumped = await memory_repo.bump_references(
            conn, tenant_ids=tenant_ids, ids=[uuid.UUID(item[1].hit.id) for item in scored]
        )
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
    timings.add("total", total)
    return response, timings


def _recall_weights(body: RecallIn, scope_settings: ScopeSettings) -> RecallWeights:
    base = scope_settings.score_weights
    weights = RecallWeights(
        relevance=base.relevance if base else 0.4,
        importance=base.importance if base else 0.3,
        recency=base.recency if base else 0.2,
        confidence=base.confidence if base else 0.1,
    )
    override = body.score_weights
    if override is None:
        return weights
    return RecallWeights(
        relevance=override.relevance if override.relevance is not None else weights.relevance,
        importance=override.importance if override.importance is not None else weights.importance,
        recency=override.recency if override.recency is not None else weights.recency,
        confidence=override.confidence if override.confidence is not None else weights.confidence,
    )
