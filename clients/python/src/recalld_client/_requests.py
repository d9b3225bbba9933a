"""Request bodies: memory writes, retrieval, files and code."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import Field

from recalld_client._model_base import MemoryType, _Request

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
