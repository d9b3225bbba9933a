"""The retrieval legs shared by search and recall: plan, keyword and vector legs, fusion."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field, replace

import asyncpg

from app.embeddings.base import Vector
from app.repositories import search as search_repo
from app.repositories import vector_indexes as vector_index_repo
from app.repositories.search import CandidateFilter
from app.retrieval import calibration
from app.retrieval.calibration import CALIBRATED_FUSION
from app.retrieval.fusion import FUSIONS, Shares, map_keyword_score, unmap_keyword_score
from app.retrieval.hits import Hit, Leg
from app.retrieval.query import ParsedQuery, ilike_patterns, keyword_query_text
from app.retrieval.scoring import tie_break_key
from app.services.retrieval_context import RetrievalSettings, semantic_blind_spot
from app.services.timings import Timings
from app.state import ServiceState

DEFAULT_KINDS = ("fact", "rule", "episode", "document")
# Fixed, not detected: BM25 (k1 1.2, b 0.75) over recalld's own per-tenant postings on every
# PostgreSQL. The startup log and /readyz name it because SPEC §1 asks them to.
KEYWORD_RANKER = "bm25"
# Whether a tenant's own HNSW index is built and valid, as the catalog said at most this long ago.
# A stale answer costs time, never results: the HNSW statement without its index sorts the tenant's
# rows (exact), and a tenant answered by the exact scan while its new index is unseen is just slower.
INDEX_CACHE_SECONDS = 30.0
# What the API calls substring (ILIKE) hits: SPEC R-S7 names that match type "fulltext".
SUBSTRING_MATCH_TYPE = "fulltext"
# Substring matches are weak evidence: they count at most half of a keyword hit.
SUBSTRING_SCORE_SCALE = 0.5
# BM25 re-scores this many candidates (at least) from the best postings of each lexeme; a second,
# deeper read multiplies the postings read by this factor before falling back to exact BM25.
KEYWORD_MIN_CANDIDATES = 150
KEYWORD_DEEPER_FACTOR = 8
# Every leg of a search asks for this many hits whatever the request's limit (the API's largest),
# so fusion sees the same candidates for limit 5 and limit 100: a limit-k answer is the first k
# of any longer one (R-S4b).
LEG_DEPTH = 100
# The exact vector leg filters this many nearest candidates per requested row first, then this
# many, then all of the tenant's (most searches filter little: the first read suffices).
EXACT_VECTOR_CANDIDATES_FACTOR = 2
EXACT_VECTOR_DEEPER_FACTOR = 16


@dataclass(frozen=True, slots=True)
class LegPlan:
    """What to run: which legs, with which weights and fusion."""

    semantic: bool
    keyword: bool
    fusion: str
    weights: dict[str, float]
    k: int
    # Legs left out because they cannot read the query, with the reason (score_breakdown shows it).
    skipped: dict[str, str] = field(default_factory=dict)


def plan_legs(state: ServiceState, settings: RetrievalSettings, *, query: str, mode: str) -> LegPlan:
    """Legs for a request in `mode`, with the fusion, weights and k its settings resolved to.

    A query the embedding model cannot read is ranked by keyword alone, in every mode: its
    vector would be noise, as without an embedder.
    """
    blind = semantic_blind_spot(state, query)
    semantic = state.embedder is not None and mode in ("hybrid", "semantic") and blind is None
    keyword = mode in ("hybrid", "keyword") or not semantic
    skipped = {"semantic": blind} if blind is not None and mode != "keyword" else {}
    return LegPlan(
        semantic=semantic,
        keyword=keyword,
        fusion=settings.fusion,
        weights=dict(settings.weights),
        k=settings.k,
        skipped=skipped,
    )


async def _indexed_tenants(
    state: ServiceState, conn: asyncpg.Connection, tenant_ids: Sequence[str]
) -> set[str]:
    """The tenants among tenant_ids whose own HNSW index is valid (vector_indexes builds them).

    Cached per process and tenant id for INDEX_CACHE_SECONDS; the maintainer updates the entry
    when it builds or drops an index. The cache holds only the catalog's yes or no, nothing of a
    tenant's data.
    """
    now = time.monotonic()
    cache = state.vector_indexes
    unknown = [t for t in tenant_ids if (hit := cache.get(t)) is None or now - hit[0] >= INDEX_CACHE_SECONDS]
    if unknown:
        found = await vector_index_repo.valid_indexes(conn, tenant_ids=unknown)
        for tenant in unknown:
            cache[tenant] = (now, tenant in found)
    return {t for t in tenant_ids if cache[t][1]}


async def run_keyword_leg(
    state: ServiceState,
    conn: asyncpg.Connection,
    f: CandidateFilter,
    parsed: ParsedQuery,
    limit: int,
    *,
    exact: bool = False,
) -> tuple[list[Hit], list[float], str, list[float]]:
    """BM25 over the tenant's postings (exact: every posting), else the substring tier.

    Returns the rows best first, each row's score as fusion takes it (BM25 mapped into [0, 1),
    substring shares scaled down), the match type, and BM25's idf of every query lexeme (read with
    the rows; empty for the substring tier).
    """
    query_text = keyword_query_text(parsed)
    if query_text:
        per_lexeme = max(state.settings.keyword_postings_per_lexeme, 2 * limit)
        candidates = max(KEYWORD_MIN_CANDIDATES, limit + KEYWORD_MIN_CANDIDATES // 3)
        # Filters (kind, scope, tags…) apply after the cut: when they leave too few rows, read
        # deeper once, then score everything. A setting of 0 asks for exact BM25 straight away.
        depths: list[int | None] = [None]
        if state.settings.keyword_postings_per_lexeme > 0 and not exact:
            depths = [per_lexeme, per_lexeme * KEYWORD_DEEPER_FACTOR, None]
        for depth in depths:
            found = await search_repo.search_by_bm25(
                conn,
                f=f,
                query_text=query_text,
                limit=limit,
                postings_per_lexeme=depth,
                candidates=candidates if depth == per_lexeme else candidates * KEYWORD_DEEPER_FACTOR,
                exact_below_postings=state.settings.keyword_exact_max_postings,
            )
            if len(found.rows) >= limit or not found.truncated:
                break
        if found.rows:
            return found.rows, [map_keyword_score(r.score) for r in found.rows], "bm25", found.query_idfs
    patterns = ilike_patterns(parsed)
    if not patterns:
        return [], [], SUBSTRING_MATCH_TYPE, []
    rows = await search_repo.search_by_substring(conn, f=f, patterns=patterns, limit=limit)
    return rows, [r.score * SUBSTRING_SCORE_SCALE for r in rows], SUBSTRING_MATCH_TYPE, []


async def run_vector_leg(
    conn: asyncpg.Connection,
    f: CandidateFilter,
    query_vector: Vector,
    limit: int,
    *,
    exact: bool,
    min_similarity: float | None,
    indexed: Collection[str] = (),
) -> list[Hit]:
    """The semantic leg for a query vector at hand (see _semantic_leg)."""

    async def at_hand() -> Vector:
        return query_vector

    rows = await _semantic_leg(
        conn, f, at_hand, limit, exact=exact, min_similarity=min_similarity, indexed=indexed
    )
    assert rows is not None  # the vector was at hand
    return rows


async def _semantic_leg(
    conn: asyncpg.Connection,
    f: CandidateFilter,
    query_vector: Callable[[], Awaitable[Vector | None]],
    limit: int,
    *,
    exact: bool,
    min_similarity: float | None,
    indexed: Collection[str] = (),
    timings: Timings | None = None,
    embedder_scripts: Collection[str] | None = None,
) -> list[Hit] | None:
    """The semantic leg: each tenant of `indexed` through its own HNSW index, the others exactly.

    Several tenants' legs are merged by score and the usual tie-break. exact=True scans every
    tenant exactly (the request's `exact: true`, and recall measurements against it). The index
    walks' settings go on before the query vector is awaited: the round trip costs the search no
    time while the query is still being embedded. None: there was no vector after all.
    """
    hnsw = [] if exact else [t for t in f.tenant_ids if t in indexed]
    async with search_repo.index_walks(conn, walk=bool(hnsw)):
        vector = await query_vector()
        if vector is None:
            return None
        started = time.perf_counter()
        if embedder_scripts is not None:
            f = replace(f, embedder_scripts=sorted(embedder_scripts))
        legs = [
            await search_repo.search_by_vector(
                conn, f=f, tenant_id=tenant, query_vector=vector, limit=limit, min_similarity=min_similarity
            )
            for tenant in hnsw
        ]
    rest = [t for t in f.tenant_ids if t not in hnsw]
    if rest:
        legs.append(await _exact_vector_leg(conn, replace(f, tenant_ids=rest), vector, limit, min_similarity))
    if timings is not None:
        timings.add("semantic", started)
    if len(legs) == 1:
        return legs[0]
    rows = (row for leg in legs for row in leg)
    return sorted(rows, key=lambda r: tie_break_key(r.score, r.created_at, r.id))[:limit]


async def _exact_vector_leg(
    conn: asyncpg.Connection,
    f: CandidateFilter,
    query_vector: Vector,
    limit: int,
    min_similarity: float | None,
) -> list[Hit]:
    """An exact scan of the tenants' vectors, filtered from the best down."""
    # Filters (kind, scope, tags…) apply to the nearest candidates only: when they leave too few
    # rows, look at more, then at all of the tenant's vectors.
    for candidates in (EXACT_VECTOR_CANDIDATES_FACTOR * limit, EXACT_VECTOR_DEEPER_FACTOR * limit, None):
        found = await search_repo.search_by_exact_vector(
            conn,
            f=f,
            query_vector=query_vector,
            limit=limit,
            candidates=candidates,
            min_similarity=min_similarity,
        )
        if not found.truncated:
            break
    return found.rows


async def rank_candidates(
    state: ServiceState,
    conn: asyncpg.Connection,
    *,
    f: CandidateFilter,
    parsed: ParsedQuery,
    vector: asyncio.Task[Vector | None] | None,
    plan: LegPlan,
    depth: int,
    min_similarity: float | None,
    timings: Timings,
    force_exact: bool = False,
) -> tuple[list[Hit], dict[str, str], Shares]:
    """Run the planned legs (each to `depth` hits) inside the open tenant transaction and fuse them.

    Returns the fused hits (unordered: callers sort their final scores with tie_break_key), each
    leg's match type, and the weights fusion used (the per-query shares for adaptive fusion, with
    the reason a leg that ran got none).
    """
    legs: dict[str, Leg] = {}
    match_types: dict[str, str] = {}
    idfs: list[float] = []
    if plan.keyword:
        started = time.perf_counter()
        rows, scores, match_types["keyword"], idfs = await run_keyword_leg(
            state, conn, f, parsed, depth, exact=force_exact
        )
        # Prepared for fusion now: the query embedding is usually still running.
        legs["keyword"] = Leg(rows, scores)
        if plan.fusion == CALIBRATED_FUSION and idfs:
            # Only BM25 has a ceiling to measure against (its idfs come with its rows).
            legs["keyword"].ceiling = calibration.keyword_ceiling(idfs)
        timings.add("keyword", started)
    embedder = state.embedder
    if plan.semantic and vector is not None and embedder is not None:
        # The catalog lookup (only every INDEX_CACHE_SECONDS) is done while the query is usually
        # still being embedded: it costs the search no time there.
        indexed = set() if force_exact else await _indexed_tenants(state, conn, f.tenant_ids)

        async def embedded() -> Vector | None:
            return await vector

        semantic_rows = await _semantic_leg(
            conn,
            f,
            embedded,
            depth,
            exact=force_exact,
            min_similarity=min_similarity,
            indexed=indexed,
            timings=timings,
            embedder_scripts=embedder.scripts,
        )
        if semantic_rows is not None:
            legs["semantic"] = Leg(semantic_rows, [row.score for row in semantic_rows])
            match_types["semantic"] = "semantic"
    started = time.perf_counter()
    fused, shares = FUSIONS[plan.fusion].fuse(
        legs, {name: plan.weights[name] for name in legs}, plan.k, depth
    )
    if plan.fusion == CALIBRATED_FUSION and "semantic" in legs and "keyword" in legs:
        _calibrate(fused, legs, idfs, depth)
    timings.add("fuse", started)
    return fused, match_types, shares


def _calibrate(fused: list[Hit], legs: dict[str, Leg], idfs: list[float], depth: int) -> None:
    """Each hit's adaptive score replaced by its calibrated probability of relevance (evidence kept)."""
    bm25 = [unmap_keyword_score(s) for s in legs["keyword"].scores] if idfs else []
    query = calibration.QueryEvidence.of(
        cosines=legs["semantic"].scores,
        bm25=bm25,
        ceiling=calibration.keyword_ceiling(idfs),
        semantic_ids=[hit.id for hit in legs["semantic"].hits],
        keyword_ids=[hit.id for hit in legs["keyword"].hits],
        depth=depth,
    )
    # The query's evidence is the same for every hit: shown and weighed once, not per hit.
    shown = query.shown()
    line = calibration.logistic_line(query)
    for hit in fused:
        hit.evidence = shown
        hit.adaptive = hit.fused
        hit.fused = calibration.on_line(line, hit.fused)
