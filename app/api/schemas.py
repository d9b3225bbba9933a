"""Request and response bodies of the memory API (every field described for /docs)."""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import AfterValidator, AliasChoices, BaseModel, ConfigDict, Field, model_validator

from app.retrieval.scoring import DEFAULT_RECALL_WEIGHTS as _W
from app.services import requests
from app.services.scopes import MAX_SCOPE_CHARS, SCOPE_PATTERN

MAX_CONTENT_BYTES = 64 * 1024
MAX_QUERY_CHARS = 4000
MIN_YEAR, MAX_YEAR = 1900, 9998
CLOCK_SKEW = timedelta(minutes=5)
MemoryType = Literal["fact", "rule", "episode", "document", "code"]


def _content_size(value: str) -> str:
    if not value.strip():
        raise ValueError("content must not be empty")
    if len(value.encode()) > MAX_CONTENT_BYTES:
        raise ValueError(f"content is larger than {MAX_CONTENT_BYTES} bytes (64 KiB)")
    return value


def _storable_time(value: datetime) -> datetime:
    # Outside these years the driver or date arithmetic overflows (year 1, or 9999 in a
    # timezone west of UTC), which would surface as a 500 instead of a clear 422.
    if not MIN_YEAR <= value.year <= MAX_YEAR:
        raise ValueError(f"must be between the years {MIN_YEAR} and {MAX_YEAR}")
    # A time without an offset is taken as UTC, as PostgreSQL's timestamptz input would.
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _not_in_future(value: datetime) -> datetime:
    # A confidence clock or creation time ahead of now would make decay grow instead of fade.
    if value > datetime.now(UTC) + CLOCK_SKEW:
        raise ValueError("must not be in the future")
    return value


Timestamp = Annotated[datetime, AfterValidator(_storable_time)]
PastTimestamp = Annotated[datetime, AfterValidator(_storable_time), AfterValidator(_not_in_future)]


def _nul_path(value: Any, where: str) -> str | None:
    """Where a NUL character sits in JSON data, or None."""
    if isinstance(value, str):
        return where if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _nul_path(key, where) or _nul_path(item, f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _nul_path(item, f"{where}.{index}" if where else str(index))
            if found is not None:
                return found
    return None


Content = Annotated[
    str,
    Field(max_length=MAX_CONTENT_BYTES, description="The memory text (at most 64 KiB)."),
    AfterValidator(_content_size),
]
ScopeName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_SCOPE_CHARS,
        pattern=SCOPE_PATTERN,
        description="Scope (usually a butler/agent name); `global` is visible from every scope.",
    ),
]
Tag = Annotated[str, Field(min_length=1, max_length=64, description="A label (1–64 characters).")]


class StrictModel(BaseModel):
    """Unknown fields are errors, so typos never pass silently."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_nul_characters(cls, data: Any) -> Any:
        # PostgreSQL text and jsonb cannot hold U+0000; without this check it is a 500.
        where = _nul_path(data, "")
        if where is not None:
            raise ValueError(
                f"{where or 'the body'} contains a NUL character (\\u0000), which cannot be stored"
            )
        return data


class MemoryCommon(StrictModel):
    """Fields every written memory has."""

    content: Content
    importance: float = Field(5.0, ge=0, le=10, description="How much this matters, 0–10.")
    scope: ScopeName = "global"
    tags: list[Tag] = Field(default_factory=list, max_length=64, description="Free-form labels.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Any JSON object, returned as stored.")
    idempotency_key: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="Retrying a write with the same key returns the first result instead of a duplicate.",
    )
    created_at: PastTimestamp | None = Field(
        None, description="When it happened; defaults to now (set it when importing older memories)."
    )

    def _draft(self, kind: requests.MemoryKind, **fields: Any) -> requests.MemoryDraft:
        return requests.MemoryDraft(
            kind=kind,
            content=self.content,
            importance=self.importance,
            scope=self.scope,
            tags=self.tags,
            metadata=self.metadata,
            idempotency_key=self.idempotency_key,
            created_at=self.created_at,
            **fields,
        )


class FactIn(MemoryCommon):
    """A fact: subject–predicate–content with a confidence that fades unless confirmed."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "content": "User is lactose intolerant",
                    "subject": "user",
                    "predicate": "diet",
                    "importance": 8,
                    "scope": "health",
                    "tags": ["diet"],
                }
            ]
        },
    )
    subject: str | None = Field(None, max_length=200, description="What the fact is about.")
    predicate: str | None = Field(None, max_length=200, description="Which property of the subject.")
    confidence: float = Field(1.0, ge=0, le=1, description="Belief at last confirmation, 0–1.")
    decay_rate: float = Field(0.008, ge=0, le=10, description="Confidence decay per day (0 = permanent).")
    last_confirmed_at: PastTimestamp | None = Field(None, description="Defaults to creation time.")
    supersedes: UUID | None = Field(
        None, description="Id of a fact this one replaces; it becomes superseded."
    )

    def to_draft(self) -> requests.MemoryDraft:
        """The service's view of this fact."""
        return self._draft(
            "fact",
            subject=self.subject,
            predicate=self.predicate,
            confidence=self.confidence,
            decay_rate=self.decay_rate,
            last_confirmed_at=self.last_confirmed_at,
            supersedes=self.supersedes,
        )


class RuleIn(MemoryCommon):
    """A rule or learned preference; like a fact without subject/predicate."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"content": "Always answer in British English", "importance": 6}]},
    )
    confidence: float = Field(0.5, ge=0, le=1, description="Belief at last confirmation, 0–1.")
    decay_rate: float = Field(0.008, ge=0, le=10, description="Confidence decay per day (0 = permanent).")
    last_confirmed_at: PastTimestamp | None = Field(None, description="Defaults to creation time.")
    supersedes: UUID | None = Field(None, description="Id of a rule this one replaces.")

    def to_draft(self) -> requests.MemoryDraft:
        """The service's view of this rule."""
        return self._draft(
            "rule",
            confidence=self.confidence,
            decay_rate=self.decay_rate,
            last_confirmed_at=self.last_confirmed_at,
            supersedes=self.supersedes,
        )


class EpisodeIn(MemoryCommon):
    """Something an agent lived through; expires (default 7 days)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"content": "Booked a table at Luigi's for Friday", "butler": "concierge"}]
        },
    )
    butler: ScopeName = Field(..., description="The agent that lived it; scope filters match on it.")
    session_id: str | None = Field(
        None, max_length=200, description="The conversation or run the episode belongs to."
    )
    expires_at: Timestamp | None = Field(
        None, description="Defaults to now + 7 days; expired episodes vanish."
    )

    def to_draft(self) -> requests.MemoryDraft:
        """The service's view of this episode."""
        return self._draft(
            "episode", butler=self.butler, session_id=self.session_id, expires_at=self.expires_at
        )


class BatchFact(FactIn):
    """A fact in a batch."""

    type: Literal["fact"] = Field(..., description="Kind of this item: `fact`.")


class BatchRule(RuleIn):
    """A rule in a batch."""

    type: Literal["rule"] = Field(..., description="Kind of this item: `rule`.")


class BatchEpisode(EpisodeIn):
    """An episode in a batch."""

    type: Literal["episode"] = Field(..., description="Kind of this item: `episode`.")


BatchItem = Annotated[BatchFact | BatchRule | BatchEpisode, Field(discriminator="type")]


class BatchIn(StrictModel):
    """Up to 1,000 memories written all-or-nothing."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "items": [
                        {"type": "fact", "content": "User's sister is called Ana", "subject": "user"},
                        {"type": "rule", "content": "Never book flights before 8am"},
                    ]
                }
            ]
        },
    )
    items: list[BatchItem] = Field(
        ...,
        min_length=1,
        max_length=1000,
        description="1–1,000 memories, each with `type` (fact, rule or episode) and the fields of that kind.",
    )


_FACT_EXAMPLE: dict[str, Any] = {
    "id": "5a4744e1-b384-42ad-b3e8-ea224528b272",
    "type": "fact",
    "content": "User experiences nausea after dairy",
    "importance": 8.0,
    "scope": "health",
    "tags": ["diet"],
    "metadata": {},
    "created_at": "2026-11-20T09:30:00Z",
    "reference_count": 0,
    "last_referenced_at": None,
    "subject": "user",
    "predicate": None,
    "confidence": 1.0,
    "decay_rate": 0.008,
    "last_confirmed_at": "2026-11-20T09:30:00Z",
    "validity": "active",
    "supersedes": None,
    "effective_confidence": 1.0,
}


class MemoryOut(BaseModel):
    """A stored memory, with the fields of its kind."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "description": "A stored memory. Facts and rules add `confidence`, `decay_rate`, "
            "`last_confirmed_at`, `validity`, `supersedes`, `effective_confidence` (facts also "
            "`subject`, `predicate`); episodes add `butler`, `session_id`, `expires_at`; document "
            "chunks add `path`, `start_line`, `end_line`.",
            "examples": [_FACT_EXAMPLE],
        },
    )
    id: UUID = Field(..., description="The memory's id (UUID).")
    type: MemoryType = Field(..., description="fact, rule, episode, document or code.")
    content: str = Field(..., description="The memory text.")
    importance: float = Field(..., description="How much this matters, 0–10.")
    scope: str = Field(..., description="Scope it was stored in (`global` unless set).")
    tags: list[str] = Field(..., description="Labels given when it was stored.")
    metadata: dict[str, Any] = Field(..., description="The JSON object given when it was stored.")
    created_at: datetime = Field(..., description="When it was stored (or the `created_at` given).")
    reference_count: int = Field(
        ..., description="How often search, recall or get returned it (this response included)."
    )
    last_referenced_at: datetime | None = Field(
        ..., description="When it was last returned by search, recall or get; null if never."
    )


class BatchOut(BaseModel):
    """The stored memories, in request order."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"items": [_FACT_EXAMPLE]}]})
    items: list[MemoryOut] = Field(..., description="One stored memory per request item, same order.")


class SearchFilters(StrictModel):
    """Extra conditions every result must meet."""

    tags: list[Tag] | None = Field(None, description="Results carry all of these tags.")
    created_after: Timestamp | None = Field(None, description="Only memories created at or after this time.")
    created_before: Timestamp | None = Field(None, description="Only memories created before this time.")
    metadata: dict[str, Any] | None = Field(None, description="Equality on top-level metadata keys.")

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

    semantic: float | None = Field(
        None, ge=0, le=100, description="Weight of the semantic leg (default 1.0)."
    )
    keyword: float | None = Field(None, ge=0, le=100, description="Weight of the keyword leg (default 1.0).")
    k: int | None = Field(None, ge=1, le=1000, description="RRF k (default 60).")

    def to_domain(self) -> requests.FusionWeights:
        """The service's view of these weights."""
        return requests.FusionWeights(semantic=self.semantic, keyword=self.keyword, k=self.k)


class SearchIn(StrictModel):
    """memory_search: hybrid (default), semantic or keyword retrieval."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra={"examples": [{"query": "what does the user eat", "limit": 5, "scope": "health"}]},
    )
    query: str = Field(
        ..., max_length=MAX_QUERY_CHARS, description="Words, a question or code (≤ 4,000 chars)."
    )
    mode: Literal["hybrid", "semantic", "keyword"] = Field(
        "hybrid",
        description="hybrid runs both legs and fuses them; without an embedding provider every mode is keyword.",
    )
    fusion: Literal["rrf", "weighted"] = Field(
        "rrf",
        description="rrf: Σ weight / (k + rank), normalised to 0–1; weighted: 0.7 · similarity + 0.3 · keyword score.",
    )
    types: list[MemoryType] | None = Field(
        None, description="Kinds to search; default fact, rule, episode and document (code only when asked)."
    )
    scope: ScopeName | None = Field(None, description="global + this scope (episodes: butler = scope).")
    limit: int = Field(
        10,
        ge=1,
        le=100,
        validation_alias=AliasChoices("limit", "max_results"),
        description="Most results to return, 1–100 (default 10); `max_results` is accepted as an alias.",
    )
    min_score: float | None = Field(None, ge=0, le=1, description="Drop fused results below (default 0.1).")
    min_similarity: float | None = Field(
        None, ge=-1, le=1, description="Drop semantic hits below this cosine."
    )
    min_confidence: float | None = Field(
        None, ge=0, le=1, description="Drop facts/rules whose effective confidence is below (default 0.2)."
    )
    filters: SearchFilters | None = Field(None, description="Tags, creation-time range, metadata equality.")
    weights: FusionWeights | None = Field(
        None, description="Fusion weights and RRF k for this request (else scope settings, else defaults)."
    )
    half_life_days: float | None = Field(None, gt=0, description="Temporal decay half-life for dated files.")
    tenants: list[str] | None = Field(None, description="Operator keys only: tenant names to search.")
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
    depth: int = Field(0, ge=0, le=3, description="Code: multi-hop depth following referenced symbols (0–3).")
    exact: bool = Field(
        False,
        description="Force an exact vector scan instead of HNSW (slower; for measuring approximate recall).",
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
        )


_SEARCH_HIT_EXAMPLE: dict[str, Any] = {
    **_FACT_EXAMPLE,
    "score": 0.962121,
    "match_type": "hybrid",
    "highlights": [[30, 35]],
    "score_breakdown": {
        "fusion": "rrf",
        "decay": 1.0,
        "fused": 0.962121,
        "ranks": {"keyword": 2, "semantic": 1},
        "raw_scores": {"keyword": 0.41, "semantic": 0.37},
        "weights": {"keyword": 1.0, "semantic": 1.0},
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
    score: float = Field(..., description="Final score, 0–1, after fusion and temporal decay.")
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
        description="Rank and raw score of each leg, fusion weights, decay factor and fused score.",
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


class RecallWeightsIn(StrictModel):
    """Composite score weights; unset ones come from scope settings, then the service defaults."""

    relevance: float | None = Field(
        None, ge=0, le=10, description=f"Weight of relevance (default {_W.relevance})."
    )
    importance: float | None = Field(
        None, ge=0, le=10, description=f"Weight of importance/10 (default {_W.importance})."
    )
    recency: float | None = Field(None, ge=0, le=10, description=f"Weight of recency (default {_W.recency}).")
    confidence: float | None = Field(
        None, ge=0, le=10, description=f"Weight of effective confidence (default {_W.confidence})."
    )

    def to_domain(self) -> requests.RecallWeightOverrides:
        """The service's view of these weights."""
        return requests.RecallWeightOverrides(
            relevance=self.relevance,
            importance=self.importance,
            recency=self.recency,
            confidence=self.confidence,
        )


class RecallIn(StrictModel):
    """memory_recall: facts and rules by relevance, importance, recency and confidence."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra={"examples": [{"topic": "user's diet", "scope": "health", "limit": 5}]},
    )
    topic: str = Field(..., max_length=MAX_QUERY_CHARS, description="What the agent is working on.")
    scope: ScopeName | None = Field(
        None, description="Facts and rules of scope `global` or this one; default the whole tenant."
    )
    limit: int = Field(
        10,
        ge=1,
        le=100,
        validation_alias=AliasChoices("limit", "max_results"),
        description="Most results to return, 1–100 (default 10); `max_results` is accepted as an alias.",
    )
    min_confidence: float | None = Field(
        None, ge=0, le=1, description="Drop rows whose effective confidence is below (default 0.2)."
    )
    score_weights: RecallWeightsIn | None = Field(
        None,
        description="Composite weights for this request (else scope settings, else "
        f"{_W.relevance}/{_W.importance}/{_W.recency}/{_W.confidence}).",
    )
    tenants: list[str] | None = Field(None, description="Operator keys only: tenant names to recall from.")
    all_tenants: bool = Field(False, description="Operator keys only: recall from every tenant.")

    def to_domain(self) -> requests.RecallRequest:
        """The service's view of this recall."""
        return requests.RecallRequest(
            topic=self.topic,
            scope=self.scope,
            limit=self.limit,
            min_confidence=self.min_confidence,
            score_weights=self.score_weights.to_domain() if self.score_weights else None,
            tenants=self.tenants,
            all_tenants=self.all_tenants,
        )


class RecallResult(BaseModel):
    """A recalled fact or rule with each signal of its score."""

    model_config = ConfigDict(extra="allow")
    id: UUID = Field(..., description="The memory's id (UUID).")
    type: MemoryType = Field(..., description="fact or rule.")
    content: str = Field(..., description="The memory text.")
    score: float = Field(
        ...,
        description="w_rel · relevance + w_imp · importance/10 + w_rec · recency + w_conf · effective_confidence.",
    )
    relevance: float = Field(..., description="Normalised hybrid search score, 0–1.")
    importance: float = Field(..., description="Stored importance, 0–10.")
    recency: float = Field(
        ..., description="exp(−ln 2 / 7 · days since last referenced, or since creation if never)."
    )
    effective_confidence: float = Field(
        ..., description="confidence · exp(−decay_rate · days since last_confirmed_at)."
    )


class RecallOut(BaseModel):
    """memory_recall response."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "results": [
                        {
                            **_FACT_EXAMPLE,
                            "score": 0.94,
                            "relevance": 1.0,
                            "recency": 1.0,
                            "reference_count": 1,
                            "last_referenced_at": "2026-11-23T11:30:45Z",
                        }
                    ],
                    "weights": asdict(_W),
                    "embedding_used": True,
                }
            ]
        }
    )
    results: list[RecallResult] = Field(..., description="Best first by composite score.")
    weights: dict[str, float] = Field(
        ..., description="The weights used (request › scope settings › defaults)."
    )
    embedding_used: bool = Field(..., description="Whether the topic was embedded for relevance.")


class ErrorDetail(BaseModel):
    """What went wrong."""

    code: str = Field(
        ...,
        description="Machine-readable: unauthorized, forbidden, not_found, validation_error, payload_too_large, …",
    )
    message: str = Field(..., description="For people: which field or rule, and why.")
    details: Any = Field(
        None, description="Per-field problems for validation errors (loc, msg, type), or null."
    )


class ErrorOut(BaseModel):
    """Every error response has this shape."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "error": {
                        "code": "validation_error",
                        "message": "importance: Input should be less than or equal to 10",
                        "details": [
                            {
                                "loc": ["body", "importance"],
                                "msg": "Input should be less than or equal to 10",
                                "type": "less_than_equal",
                            }
                        ],
                    }
                }
            ]
        }
    )
    error: ErrorDetail = Field(..., description="The error.")
