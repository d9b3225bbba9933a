"""Request and response bodies, named and shaped like the schemas of recalld's OpenAPI document.

Requests refuse unknown fields (the server would too); responses keep fields this version does not
know yet (`extra="allow"`), so a newer server never breaks an older client. Limits (lengths, ranges)
are left to the server, whose 422 names each problem.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

MemoryType = Literal["fact", "rule", "episode", "document", "code"]


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class _Response(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


# Requests: memory writes.


class _MemoryIn(_Request):
    content: str
    importance: float = 5.0
    scope: str = "global"
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    idempotency_key: str | None = None
    created_at: datetime | None = None


class FactIn(_MemoryIn):
    """A fact: subject–predicate–content with a confidence that fades unless confirmed."""

    subject: str | None = None
    predicate: str | None = None
    confidence: float = 1.0
    decay_rate: float = 0.008
    last_confirmed_at: datetime | None = None
    supersedes: UUID | None = None
    # "subject_predicate": replaces the scope's active facts of the same subject and predicate.
    supersede: Literal["subject_predicate"] | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None


class RuleIn(_MemoryIn):
    """A rule or learned preference."""

    confidence: float = 0.5
    decay_rate: float = 0.008
    last_confirmed_at: datetime | None = None
    supersedes: UUID | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None


class EpisodeIn(_MemoryIn):
    """Something an agent (butler) lived through; expires after 7 days unless expires_at says otherwise."""

    butler: str
    session_id: str | None = None
    expires_at: datetime | None = None


class BatchFact(FactIn):
    """A fact in memory_store_batch."""

    type: Literal["fact"] = "fact"


class BatchRule(RuleIn):
    """A rule in memory_store_batch."""

    type: Literal["rule"] = "rule"


class BatchEpisode(EpisodeIn):
    """An episode in memory_store_batch."""

    type: Literal["episode"] = "episode"


BatchItem = Annotated[BatchFact | BatchRule | BatchEpisode, Field(discriminator="type")]


class BatchIn(_Request):
    """Up to 1,000 memories written all-or-nothing."""

    items: list[BatchItem]


# Requests: retrieval.


class SearchFilters(_Request):
    """Extra conditions every search result must meet."""

    tags: list[str] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    metadata: dict[str, Any] | None = None


class FusionWeights(_Request):
    """Per-request fusion weights and RRF k."""

    semantic: float | None = None
    keyword: float | None = None
    k: int | None = None


class RerankOptions(_Request):
    """Reranking of the fused top-N."""

    top_n: int | None = None


class SearchIn(_Request):
    """memory_search."""

    query: str
    mode: Literal["hybrid", "semantic", "keyword"] = "hybrid"
    fusion: Literal["adaptive", "rrf", "weighted"] = "adaptive"
    types: list[MemoryType] | None = None
    scope: str | None = None
    limit: int = 10
    min_score: float | None = None
    min_similarity: float | None = None
    min_confidence: float | None = None
    as_of: datetime | None = None
    filters: SearchFilters | None = None
    weights: FusionWeights | None = None
    half_life_days: float | None = None
    tenants: list[str] | None = None
    all_tenants: bool = False
    repository: str | None = None
    file_filter: str | None = None
    exclude_filter: str | None = None
    symbol: str | None = None
    depth: int = 0
    exact: bool = False
    rerank: bool | RerankOptions | None = None
    diversity: float | None = None
    context_window: int = 0


class RecallWeightsIn(_Request):
    """memory_recall composite weights for one request."""

    relevance: float | None = None
    importance: float | None = None
    recency: float | None = None
    confidence: float | None = None


class RecallIn(_Request):
    """memory_recall."""

    topic: str
    scope: str | None = None
    limit: int = 10
    min_confidence: float | None = None
    score_weights: RecallWeightsIn | None = None
    as_of: datetime | None = None
    tenants: list[str] | None = None
    all_tenants: bool = False


# Requests: files and code.


class DocumentIn(_Request):
    """A markdown memory file."""

    path: str
    content: str
    scope: str = "global"


class CodeFileIn(_Request):
    """One source file."""

    path: str
    content: str


class CodeFilesIn(_Request):
    """Source files of one repository."""

    repository: str
    files: list[CodeFileIn]


class ResearchIn(_Request):
    """A structural question about indexed code, in words (`query`) or as `kind` + `symbol`."""

    query: str | None = None
    kind: Literal["implementations", "callers", "callees", "related", "dependencies"] | None = None
    symbol: str | None = None
    depth: int = 2
    repository: str | None = None


# Scope settings: the same shape both ways, so unknown fields of a newer server are kept.


class ScoreWeights(_Response):
    """memory_recall composite weights of a scope."""

    relevance: float = 0.4
    importance: float = 0.3
    recency: float = 0.2
    confidence: float = 0.1


class FusionWeightSettings(_Response):
    """Search fusion weights and RRF k of a scope."""

    semantic: float | None = None
    keyword: float | None = None
    k: int | None = None


class ScopeSettings(_Response):
    """Everything a scope can override; unset fields fall back to the service settings."""

    score_weights: ScoreWeights | None = None
    fusion: str | None = None
    fusion_weights: FusionWeightSettings | None = None
    half_life_days: float | None = None
    recency_half_life_days: float | None = None
    rerank: bool | None = None
    rerank_top_n: int | None = None
    single_valued_predicates: list[str] | None = None
    merge_near_duplicates: bool | None = None


# Responses.


class _KindFields(_Response):
    """Fields of one kind of memory (facts and rules, episodes, document chunks, code chunks)."""

    subject: str | None = None
    predicate: str | None = None
    confidence: float | None = None
    decay_rate: float | None = None
    last_confirmed_at: datetime | None = None
    validity: str | None = None
    supersedes: UUID | None = None
    superseded_by: UUID | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    effective_confidence: float | None = None
    butler: str | None = None
    session_id: str | None = None
    expires_at: datetime | None = None
    path: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    repository: str | None = None
    symbol: str | None = None
    symbol_kind: str | None = None
    language: str | None = None
    parent_symbol: str | None = None


class MemoryOut(_KindFields):
    """A stored memory, with the fields of its kind (the others are None)."""

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


class SimilarMemory(_Response):
    """An active memory close to what was written, though not the same after normalisation."""

    id: UUID
    similarity: float
    word_overlap: float


class MemoryWriteOut(MemoryOut):
    """A write's answer: the memory, and what the write did besides storing it.

    `duplicate_of` is set when the write repeated an active memory (that memory answers; nothing new
    was stored); `superseded` lists the ids the write replaced; `similar_to` its near-duplicates.
    """

    duplicate_of: UUID | None
    superseded: list[UUID]
    similar_to: list[SimilarMemory]


class BatchOut(_Response):
    """One answer per request item, in request order."""

    items: list[MemoryWriteOut]


class MemoryHistory(_Response):
    """A supersession chain: the memory and what it replaced or was replaced by, newest first."""

    items: list[MemoryOut]


class MemoryPage(_Response):
    """One page of memory_list; pass `next_cursor` as `cursor` for the next (None on the last)."""

    items: list[MemoryOut]
    next_cursor: str | None


class ContextTurn(_Response):
    """A neighbouring turn of an episode hit in its session."""

    id: UUID
    content: str
    metadata: dict[str, Any]
    created_at: datetime
    offset: int


class SearchResult(_KindFields):
    """One search hit: the memory's fields, its score and why it ranked there."""

    id: UUID
    type: MemoryType
    content: str
    score: float
    match_type: str
    highlights: list[tuple[int, int]]
    scope: str
    created_at: datetime
    score_breakdown: dict[str, Any]
    context: list[ContextTurn] | None = None
    importance: float | None = None
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    reference_count: int | None = None
    last_referenced_at: datetime | None = None


class RerankReport(_Response):
    """Whether the reranker re-ordered a search."""

    applied: bool
    provider: str | None = None
    top_n: int
    error: str | None = None


class SearchOut(_Response):
    """memory_search answer."""

    results: list[SearchResult]
    mode: str
    keyword_ranker: str
    embedding_used: bool
    rerank: RerankReport | None = None
    abstained: bool = False
    best_score: float | None = None


class RecallResult(_KindFields):
    """A recalled fact or rule with each signal of its composite score."""

    id: UUID
    type: MemoryType
    content: str
    score: float
    relevance: float
    importance: float
    recency: float
    effective_confidence: float  # always set for facts and rules
    scope: str | None = None
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    created_at: datetime | None = None
    reference_count: int | None = None
    last_referenced_at: datetime | None = None


class RecallOut(_Response):
    """memory_recall answer."""

    results: list[RecallResult]
    weights: dict[str, float]
    embedding_used: bool
    abstained: bool = False
    best_score: float | None = None


class DocumentOut(_Response):
    """What document_put did."""

    path: str
    chunks: int
    embedded: int
    unchanged: bool


class DocumentSlice(_Response):
    """Lines of a stored file (`from_line` is the API's `from`)."""

    path: str
    from_line: int = Field(alias="from")
    to: int
    total_lines: int
    content: str
    content_hash: str


class DocumentListing(_Response):
    """A stored file."""

    path: str
    content_hash: str


class DocumentList(_Response):
    """Every stored file of the tenant."""

    documents: list[DocumentListing]


class CodeIndexOut(_Response):
    """What code_index_files did."""

    repository: str
    files: int
    skipped: int
    chunks: int
    embedded: int
    symbols: int
    edges: int
    unsupported: list[str]


class CodeFileListing(_Response):
    """An indexed source file."""

    path: str
    content_hash: str


class CodeFileList(_Response):
    """Indexed files of a repository."""

    repository: str
    files: list[CodeFileListing]


class ResearchItem(_Response):
    """One symbol in a code_research answer, with where it is and how it relates."""

    symbol: str | None = None
    symbol_kind: str | None = None
    parent_symbol: str | None = None
    path: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    relation: str | None = None
    chunk_id: UUID | None = None


class ResearchOut(_Response):
    """code_research answer."""

    kind: str
    symbol: str | None = None
    items: list[ResearchItem] = Field(default_factory=list)


class ErrorDetail(_Response):
    """The `error` object of every error answer."""

    code: str
    message: str
    details: Any = None


class ErrorOut(_Response):
    """Every error answer has this shape."""

    error: ErrorDetail
