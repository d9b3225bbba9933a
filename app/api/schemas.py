"""Request and response bodies of the memory API (every field described for /docs)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import AfterValidator, AliasChoices, BaseModel, ConfigDict, Field

MAX_CONTENT_BYTES = 64 * 1024
MAX_QUERY_CHARS = 4000
MemoryType = Literal["fact", "rule", "episode", "document", "code"]


def _content_size(value: str) -> str:
    if not value.strip():
        raise ValueError("content must not be empty")
    if len(value.encode()) > MAX_CONTENT_BYTES:
        raise ValueError(f"content is larger than {MAX_CONTENT_BYTES} bytes (64 KiB)")
    return value


Content = Annotated[
    str,
    Field(max_length=MAX_CONTENT_BYTES, description="The memory text (at most 64 KiB)."),
    AfterValidator(_content_size),
]
ScopeName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$",
        description="Scope (usually a butler/agent name); `global` is visible from every scope.",
    ),
]
Tag = Annotated[str, Field(min_length=1, max_length=64)]


class StrictModel(BaseModel):
    """Unknown fields are errors, so typos never pass silently."""

    model_config = ConfigDict(extra="forbid")


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
    created_at: datetime | None = Field(
        None, description="When it happened; defaults to now (set it when importing older memories)."
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
    last_confirmed_at: datetime | None = Field(None, description="Defaults to creation time.")
    supersedes: UUID | None = Field(
        None, description="Id of a fact this one replaces; it becomes superseded."
    )


class RuleIn(MemoryCommon):
    """A rule or learned preference; like a fact without subject/predicate."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"content": "Always answer in British English", "importance": 6}]},
    )
    confidence: float = Field(0.5, ge=0, le=1, description="Belief at last confirmation, 0–1.")
    decay_rate: float = Field(0.008, ge=0, le=10, description="Confidence decay per day (0 = permanent).")
    last_confirmed_at: datetime | None = Field(None, description="Defaults to creation time.")
    supersedes: UUID | None = Field(None, description="Id of a rule this one replaces.")


class EpisodeIn(MemoryCommon):
    """Something an agent lived through; expires (default 7 days)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"content": "Booked a table at Luigi's for Friday", "butler": "concierge"}]
        },
    )
    butler: ScopeName = Field(..., description="The agent that lived it; scope filters match on it.")
    session_id: str | None = Field(None, max_length=200)
    expires_at: datetime | None = Field(
        None, description="Defaults to now + 7 days; expired episodes vanish."
    )


class BatchFact(FactIn):
    """A fact in a batch."""

    type: Literal["fact"]


class BatchRule(RuleIn):
    """A rule in a batch."""

    type: Literal["rule"]


class BatchEpisode(EpisodeIn):
    """An episode in a batch."""

    type: Literal["episode"]


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
    items: list[BatchItem] = Field(..., min_length=1, max_length=1000)


class MemoryOut(BaseModel):
    """A stored memory. Kind-specific fields are present for that kind only."""

    model_config = ConfigDict(extra="allow")
    id: UUID
    type: MemoryType
    content: str
    importance: float
    scope: str
    tags: list[str]
    metadata: dict[str, Any]
    created_at: datetime
    reference_count: int
    last_referenced_at: datetime | None


class BatchOut(BaseModel):
    """The stored memories, in request order."""

    items: list[MemoryOut]


class SearchFilters(StrictModel):
    """Extra conditions every result must meet."""

    tags: list[Tag] | None = Field(None, description="Results carry all of these tags.")
    created_after: datetime | None = None
    created_before: datetime | None = None
    metadata: dict[str, Any] | None = Field(None, description="Equality on top-level metadata keys.")


class FusionWeights(StrictModel):
    """Per-request fusion weights; unset values come from scope settings, then defaults."""

    semantic: float | None = Field(None, ge=0, le=100)
    keyword: float | None = Field(None, ge=0, le=100)
    k: int | None = Field(None, ge=1, le=1000, description="RRF k.")


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
    mode: Literal["hybrid", "semantic", "keyword"] = "hybrid"
    fusion: Literal["rrf", "weighted"] = "rrf"
    types: list[MemoryType] | None = Field(None, description="Kinds to search; default all.")
    scope: ScopeName | None = Field(None, description="global + this scope (episodes: butler = scope).")
    limit: int = Field(
        10, ge=1, le=100, validation_alias=AliasChoices("limit", "max_results"), description="At most 100."
    )
    min_score: float | None = Field(None, ge=0, le=1, description="Drop fused results below (default 0.1).")
    min_similarity: float | None = Field(
        None, ge=-1, le=1, description="Drop semantic hits below this cosine."
    )
    min_confidence: float | None = Field(
        None, ge=0, le=1, description="Drop facts/rules whose effective confidence is below (default 0.2)."
    )
    filters: SearchFilters | None = None
    weights: FusionWeights | None = None
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


class ScoreBreakdown(BaseModel):
    """How a result's score came about."""

    model_config = ConfigDict(extra="allow")


class SearchResult(BaseModel):
    """One search hit."""

    model_config = ConfigDict(extra="allow")
    id: UUID
    type: MemoryType
    content: str
    score: float
    match_type: str
    highlights: list[tuple[int, int]]
    scope: str
    created_at: datetime
    score_breakdown: dict[str, Any]


class SearchOut(BaseModel):
    """memory_search response."""

    results: list[SearchResult]
    mode: str
    keyword_ranker: str
    embedding_used: bool


class RecallWeightsIn(StrictModel):
    """Composite score weights; unset ones come from scope settings, then 0.4/0.3/0.2/0.1."""

    relevance: float | None = Field(None, ge=0, le=10)
    importance: float | None = Field(None, ge=0, le=10)
    recency: float | None = Field(None, ge=0, le=10)
    confidence: float | None = Field(None, ge=0, le=10)


class RecallIn(StrictModel):
    """memory_recall: facts and rules by relevance, importance, recency and confidence."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra={"examples": [{"topic": "user's diet", "scope": "health", "limit": 5}]},
    )
    topic: str = Field(..., max_length=MAX_QUERY_CHARS, description="What the agent is working on.")
    scope: ScopeName | None = None
    limit: int = Field(10, ge=1, le=100, validation_alias=AliasChoices("limit", "max_results"))
    min_confidence: float | None = Field(None, ge=0, le=1)
    score_weights: RecallWeightsIn | None = None
    tenants: list[str] | None = Field(None, description="Operator keys only.")
    all_tenants: bool = False


class RecallResult(BaseModel):
    """A recalled fact or rule with each signal of its score."""

    model_config = ConfigDict(extra="allow")
    id: UUID
    type: MemoryType
    content: str
    score: float
    relevance: float
    importance: float
    recency: float
    effective_confidence: float


class RecallOut(BaseModel):
    """memory_recall response."""

    results: list[RecallResult]
    weights: dict[str, float]
    embedding_used: bool
