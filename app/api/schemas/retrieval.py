"""Bodies of memory_search."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StrictBool

from app.api.schemas.common import (
    MAX_QUERY_CHARS,
    MAX_TENANTS,
    MemoryType,
    Metadata,
    ScopeName,
    StrictModel,
    Tag,
    TenantName,
    Timestamp,
)
from app.api.schemas.memories import FACT_EXAMPLE
from app.api.schemas.search_stages import (
    MAX_CONTEXT_WINDOW,
    ContextTurn,
    RerankOptions,
    RerankReport,
)
from app.input_rules import Integer, Number
from app.retrieval.fusion import K_BOUNDS, WEIGHT_BOUNDS, FusionName
from app.services import requests


class SearchFilters(StrictModel):
    """Extra conditions every result must meet."""

    tags: list[Tag] | None = Field(
        None, max_length=64, description="Results carry all of these tags (at most 64)."
    )
    created_after: Timestamp | None = Field(None, description="Only memories created at or after this time.")
    created_before: Timestamp | None = Field(None, description="Only memories created before this time.")
    metadata: Metadata | None = Field(None, description="Equality on top-level metadata keys.")

    def to_domain(self) -> requests.SearchFilters:
        """The service's view of these filters."""
        return requests.SearchFilters(
            tags=self.tags,
            created_after=self.created_after,
            created_before=self.created_before,
            metadata=self.metadata,
        )


class FusionWeights(StrictModel):
    """Per-request fusion weights; unset values come from scope settings, then defaults."""

    semantic: Number | None = Field(
        None,
        ge=WEIGHT_BOUNDS[0],
        le=WEIGHT_BOUNDS[1],
        description="Weight of the semantic leg (default 1.0).",
    )
    keyword: Number | None = Field(
        None, ge=WEIGHT_BOUNDS[0], le=WEIGHT_BOUNDS[1], description="Weight of the keyword leg (default 1.0)."
    )
    k: Integer | None = Field(None, ge=K_BOUNDS[0], le=K_BOUNDS[1], description="RRF k (default 60).")

    def to_domain(self) -> requests.FusionWeights:
        """The service's view of these weights."""
        return requests.FusionWeights(semantic=self.semantic, keyword=self.keyword, k=self.k)


class SearchIn(StrictModel):
    """memory_search: hybrid (default), semantic or keyword retrieval."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra={
            "examples": [
                {"query": "what does the user eat", "limit": 5, "scope": "health"},
                {
                    "query": "when is Ana visiting",
                    "rerank": {"top_n": 20},
                    "diversity": 0.3,
                    "context_window": 2,
                },
            ]
        },
    )
    query: str = Field(
        ..., max_length=MAX_QUERY_CHARS, description="Words, a question or code (≤ 4,000 chars)."
    )
    mode: Literal["hybrid", "semantic", "keyword"] = Field(
        "hybrid",
        description="hybrid runs both legs and fuses them; without an embedding provider every mode is keyword.",
    )
    fusion: FusionName = Field(
        "adaptive",
        description="adaptive (default; unsent: the scope's, else the service's default): per-query leg "
        "shares from each leg's confidence, over normalised scores, reported as a calibrated probability "
        "of relevance; rrf: Σ weight / (k + rank), normalised to 0–1; weighted: 0.7 · similarity + 0.3 · "
        "keyword score.",
    )
    types: list[MemoryType] | None = Field(
        None, description="Kinds to search; default fact, rule, episode and document (code only when asked)."
    )
    scope: ScopeName | None = Field(None, description="global + this scope (episodes: butler = scope).")
    limit: Integer = Field(
        10,
        ge=1,
        le=100,
        validation_alias=AliasChoices("limit", "max_results"),
        description="Most results to return, 1–100 (default 10); `max_results` is accepted as an alias.",
    )
    min_score: Number | None = Field(
        None,
        ge=0,
        le=1,
        description="Drop results scoring below this. Default: 0.04 on the calibrated scale (default fusion, "
        "both legs; if no result reaches it: `results: []`, `abstained: true`; else results down to "
        "half the best score stay), else 0.1. 0 returns the best-effort list.",
    )
    min_similarity: Number | None = Field(
        None, ge=-1, le=1, description="Drop semantic hits below this cosine."
    )
    min_confidence: Number | None = Field(
        None, ge=0, le=1, description="Drop facts/rules whose effective confidence is below (default 0.2)."
    )
    as_of: Timestamp | None = Field(
        None,
        description="Answer as of this time: facts and rules valid then (superseded ones included), "
        "other memories stored by then. Default: what is valid now.",
    )
    filters: SearchFilters | None = Field(None, description="Tags, creation-time range, metadata equality.")
    weights: FusionWeights | None = Field(
        None, description="Fusion weights and RRF k for this request (else scope settings, else defaults)."
    )
    half_life_days: Number | None = Field(
        None, gt=0, le=36500, description="Temporal decay half-life for dated files, in days (≤ 36,500)."
    )
    tenants: list[TenantName] | None = Field(
        None, max_length=MAX_TENANTS, description="Operator keys only: tenant names to search."
    )
    all_tenants: bool = Field(False, description="Operator keys only: search every tenant.")
    repository: str | None = Field(None, max_length=200, description="Code: only this repository.")
    file_filter: str | None = Field(
        None,
        max_length=500,
        description="Code/documents: path glob, `**` aware (`Sources/Auth/**`, `*.swift`).",
    )
    exclude_filter: str | None = Field(
        None, max_length=500, description="Path glob to leave out (`**/Tests/**`)."
    )
    symbol: str | None = Field(
        None,
        max_length=200,
        description="Code: exact symbol search; the definition ranks first, a type brings its methods and extensions.",
    )
    depth: Integer = Field(
        0, ge=0, le=3, description="Code: multi-hop depth following referenced symbols (0–3)."
    )
    exact: bool = Field(
        False,
        description="Exact legs: a full vector scan instead of HNSW and BM25 over every posting instead of "
        "the best per lexeme (slower; for measuring the approximate rankings).",
    )
    rerank: StrictBool | RerankOptions | None = Field(
        None,
        description="Re-order the fused top-N with the configured reranker (cross-encoder or HTTP "
        '/rerank): `true`, `false` or `{"top_n": 20}`. Unset: the scope\'s setting, else '
        "RECALLD_RERANK_DEFAULT (off). A reranker that fails or times out leaves the fused order, and "
        "the response's `rerank` says why; the search never fails for it.",
        examples=[True, {"top_n": 20}],
    )
    diversity: Number | None = Field(
        None,
        ge=0,
        le=1,
        description="MMR diversity λ, 0–1: re-order the top-N by (1 − λ) · relevance − λ · the highest "
        "cosine to a result already above it, so near-duplicates do not fill the page. 0 or unset: off.",
        examples=[0.5],
    )
    context_window: Integer = Field(
        0,
        ge=0,
        le=MAX_CONTEXT_WINDOW,
        description="Episodes with a session_id: attach up to this many turns before and after each hit "
        "as `context` (same session and agent, by created_at then id), 0–10; they do not count "
        "against `limit`.",
        examples=[2],
    )

    def to_domain(self) -> requests.SearchRequest:
        """The service's view of this search; an unsent `fusion` leaves the choice to scope settings."""
        return requests.SearchRequest(
            query=self.query,
            mode=self.mode,
            fusion=self.fusion if "fusion" in self.model_fields_set else None,
            types=self.types,
            scope=self.scope,
            limit=self.limit,
            min_score=self.min_score,
            min_similarity=self.min_similarity,
            min_confidence=self.min_confidence,
            filters=self.filters.to_domain() if self.filters else None,
            weights=self.weights.to_domain() if self.weights else None,
            half_life_days=self.half_life_days,
            tenants=self.tenants,
            all_tenants=self.all_tenants,
            repository=self.repository,
            file_filter=self.file_filter,
            exclude_filter=self.exclude_filter,
            symbol=self.symbol,
            depth=self.depth,
            exact=self.exact,
            rerank=True if isinstance(self.rerank, RerankOptions) else self.rerank,
            rerank_top_n=self.rerank.top_n if isinstance(self.rerank, RerankOptions) else None,
            diversity=self.diversity,
            context_window=self.context_window,
            as_of=self.as_of,
        )


_SEARCH_HIT_EXAMPLE: dict[str, Any] = {
    **FACT_EXAMPLE,
    "score": 0.962121,
    "match_type": "hybrid",
    "highlights": [[30, 35]],
    "score_breakdown": {
        "fusion": "adaptive",
        "decay": 1.0,
        "fused": 0.962121,
        "ranks": {"keyword": 2, "semantic": 1},
        "raw_scores": {"keyword": 0.41, "semantic": 0.37},
        "weights": {"keyword": 0.44, "semantic": 0.56},
    },
    "reference_count": 1,
    "last_referenced_at": "2026-11-23T11:30:45Z",
}


class SearchResult(BaseModel):
    """One search hit, with the stored memory's fields and why it ranked where it did."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [_SEARCH_HIT_EXAMPLE]})
    id: UUID = Field(..., description="The memory's id (UUID).")
    type: MemoryType = Field(..., description="fact, rule, episode, document or code.")
    content: str = Field(..., description="The memory (or chunk) text.")
    score: float = Field(
        ...,
        description="Final score, 0–1, after fusion and temporal decay. With the default fusion (adaptive, "
        "both legs) it is calibrated: the estimated probability that the memory is relevant to the query, "
        "on one scale for every query, tenant and kind (0.8 is as trustworthy on one query as on another). "
        "rrf and weighted scores are relative, not probabilities.",
    )
    match_type: str = Field(
        ..., description="bm25, fulltext, semantic, hybrid (both legs), multi-hop or symbol."
    )
    highlights: list[tuple[int, int]] = Field(
        ..., description="[start, end) character spans of matched query terms in `content`."
    )
    scope: str = Field(..., description="Scope of the memory.")
    created_at: datetime = Field(..., description="When it was stored.")
    score_breakdown: dict[str, Any] = Field(
        ...,
        description="Rank and raw score of each leg, fusion weights (adaptive: this query's shares), "
        "decay factor and fused score; `legs_skipped` names a leg left out or given no weight and why (a "
        "query script the embedding model does not read; a keyword leg that matched no query term); `rerank: {score, rank}` when a reranker re-ordered it, `mmr: {score, max_similarity}` with "
        "`diversity`.",
    )
    context: list[ContextTurn] | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="With `context_window`, for an episode hit with a session_id: its neighbouring turns "
        "in that session, oldest first (`offset` < 0 before the hit, > 0 after it).",
    )


class SearchOut(BaseModel):
    """memory_search response."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "results": [_SEARCH_HIT_EXAMPLE],
                    "mode": "hybrid",
                    "keyword_ranker": "bm25",
                    "embedding_used": True,
                    "abstained": False,
                    "best_score": 0.962121,
                }
            ]
        }
    )
    results: list[SearchResult] = Field(..., description="Best first; ties by created_at DESC, then id.")
    mode: str = Field(..., description="The mode that ran (keyword when there is no embedding provider).")
    keyword_ranker: str = Field(
        ..., description="Keyword ranker in use: bm25 (per-tenant statistics, on every PostgreSQL)."
    )
    embedding_used: bool = Field(..., description="Whether the query was embedded (semantic leg ran).")
    abstained: bool = Field(
        False,
        description="True when candidates were found but none reached the score floor: nothing stored is "
        "relevant enough, so `results` is empty. Ask again with `min_score: 0` for the best-effort list.",
    )
    best_score: float | None = Field(
        None, description="The best score any candidate reached, shown or not (null: no candidate at all)."
    )
    rerank: RerankReport | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="Present when reranking was asked for (request, scope or setting).",
    )
