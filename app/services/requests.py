"""What the services are asked to do: plain dataclasses the API, MCP and CLI doors map their input to."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

MemoryKind = Literal["fact", "rule", "episode"]


@dataclass(frozen=True, slots=True)
class MemoryDraft:
    """A fact, rule or episode to store; fields of the other kinds stay None."""

    kind: MemoryKind
    content: str
    importance: float
    scope: str
    tags: Sequence[str]
    metadata: dict[str, Any]
    idempotency_key: str | None
    created_at: datetime | None
    # Facts and rules.
    confidence: float | None = None
    decay_rate: float | None = None
    last_confirmed_at: datetime | None = None
    supersedes: uuid.UUID | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    # Facts.
    subject: str | None = None
    predicate: str | None = None
    # "subject_predicate": replace the active facts of the same subject, predicate and scope.
    supersede: Literal["subject_predicate"] | None = None
    # Episodes.
    butler: str | None = None
    session_id: str | None = None
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class SearchFilters:
    """Conditions every search result meets."""

    tags: Sequence[str] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    metadata: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class FusionWeights:
    """Fusion weights and RRF k asked for; None falls back to scope settings, then service defaults."""

    semantic: float | None = None
    keyword: float | None = None
    k: int | None = None


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """memory_search."""

    query: str
    mode: str
    # None: the scope's default fusion, else rrf.
    fusion: str | None
    types: Sequence[str] | None
    scope: str | None
    limit: int
    min_score: float | None
    min_similarity: float | None
    min_confidence: float | None
    filters: SearchFilters | None
    weights: FusionWeights | None
    half_life_days: float | None
    tenants: Sequence[str] | None
    all_tenants: bool
    repository: str | None
    file_filter: str | None
    exclude_filter: str | None
    symbol: str | None
    depth: int
    exact: bool
    # None: the scope's setting, else RECALLD_RERANK_DEFAULT.
    rerank: bool | None = None
    rerank_top_n: int | None = None
    diversity: float | None = None
    context_window: int = 0
    # What was valid then (R-M8); None: what is valid now.
    as_of: datetime | None = None


@dataclass(frozen=True, slots=True)
class RecallWeightOverrides:
    """Composite weights asked for; None falls back to scope settings, then the defaults."""

    relevance: float | None = None
    importance: float | None = None
    recency: float | None = None
    confidence: float | None = None


@dataclass(frozen=True, slots=True)
class RecallRequest:
    """memory_recall."""

    topic: str
    scope: str | None
    limit: int
    min_confidence: float | None
    score_weights: RecallWeightOverrides | None
    tenants: Sequence[str] | None
    all_tenants: bool
    as_of: datetime | None = None
