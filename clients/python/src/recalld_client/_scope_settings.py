"""A scope's retrieval settings, sent and answered in one shape."""

from __future__ import annotations

from recalld_client._model_base import _Response

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
