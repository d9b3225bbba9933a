"""Bodies of memory_recall."""

from __future__ import annotations

from dataclasses import asdict
from uuid import UUID

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from app.api.schemas.common import (
    MAX_QUERY_CHARS,
    MAX_TENANTS,
    MemoryType,
    ScopeName,
    StrictModel,
    TenantName,
    Timestamp,
)
from app.api.schemas.memories import FACT_EXAMPLE
from app.input_rules import Integer, Number
from app.retrieval.scoring import DEFAULT_RECALL_WEIGHTS as _W
from app.services import requests


class RecallWeightsIn(StrictModel):
    """Composite score weights; unset ones come from scope settings, then the service defaults."""

    relevance: Number | None = Field(
        None, ge=0, le=10, description=f"Weight of relevance (default {_W.relevance})."
    )
    importance: Number | None = Field(
        None, ge=0, le=10, description=f"Weight of importance/10 (default {_W.importance})."
    )
    recency: Number | None = Field(
        None, ge=0, le=10, description=f"Weight of recency (default {_W.recency})."
    )
    confidence: Number | None = Field(
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
    limit: Integer = Field(
        10,
        ge=1,
        le=100,
        validation_alias=AliasChoices("limit", "max_results"),
        description="Most results to return, 1–100 (default 10); `max_results` is accepted as an alias.",
    )
    min_confidence: Number | None = Field(
        None, ge=0, le=1, description="Drop rows whose effective confidence is below (default 0.2)."
    )
    score_weights: RecallWeightsIn | None = Field(
        None,
        description="Composite weights for this request (else scope settings, else "
        f"{_W.relevance}/{_W.importance}/{_W.recency}/{_W.confidence}).",
    )
    as_of: Timestamp | None = Field(
        None, description="Facts and rules valid at this time, superseded ones included. Default: now."
    )
    tenants: list[TenantName] | None = Field(
        None, max_length=MAX_TENANTS, description="Operator keys only: tenant names to recall from."
    )
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
            as_of=self.as_of,
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
    relevance: float = Field(
        ...,
        description="The hybrid search score, 0–1: the calibrated probability that the memory is relevant "
        "(both legs), else the normalised fused score. Below the relevance floor a memory is not recalled.",
    )
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
                            **FACT_EXAMPLE,
                            "score": 0.94,
                            "relevance": 1.0,
                            "recency": 1.0,
                            "reference_count": 1,
                            "last_referenced_at": "2026-11-23T11:30:45Z",
                        }
                    ],
                    "weights": asdict(_W),
                    "embedding_used": True,
                    "abstained": False,
                    "best_score": 0.87,
                }
            ]
        }
    )
    results: list[RecallResult] = Field(..., description="Best first by composite score.")
    weights: dict[str, float] = Field(
        ..., description="The weights used (request › scope settings › defaults)."
    )
    embedding_used: bool = Field(..., description="Whether the topic was embedded for relevance.")
    abstained: bool = Field(
        False,
        description="True when candidates were found but none reached the relevance floor: nothing stored is "
        "relevant enough, so `results` is empty. Search with `min_score: 0` for the best-effort list.",
    )
    best_score: float | None = Field(
        None, description="The best score any candidate reached, shown or not (null: no candidate at all)."
    )
