"""The optional post-fusion stages of memory_search: reranking, and conversation context."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel, Field

from app.api.schemas.common import StrictModel
from app.infra.config import MAX_RERANK_TOP_N
from app.input_rules import Integer

MAX_CONTEXT_WINDOW = 10


class RerankOptions(StrictModel):
    """Reranking of this request's fused top-N."""

    top_n: Integer | None = Field(
        None,
        ge=1,
        le=MAX_RERANK_TOP_N,
        description="How many fused results the reranker re-orders, 1–100 (else scope settings, else "
        "RECALLD_RERANK_TOP_N, default 50). Results past it keep the fused order.",
    )


class ContextTurn(BaseModel):
    """A neighbouring turn of an episode hit in its conversation (session)."""

    id: UUID = Field(..., description="The turn's memory id.")
    content: str = Field(..., description="The turn's text.")
    metadata: dict[str, Any] = Field(..., description="The turn's metadata (e.g. the speaker).")
    created_at: datetime = Field(..., description="When the turn was stored (or its `created_at`).")
    offset: int = Field(..., description="Turns before (< 0) or after (> 0) the hit, in session order.")


class RerankReport(BaseModel):
    """Whether the reranker re-ordered this response."""

    applied: bool = Field(..., description="True when the top-N follow the reranker's scores.")
    provider: str | None = Field(None, description="cross-encoder or http; null when none is configured.")
    top_n: int = Field(..., description="How many fused results were sent to the reranker.")
    error: str | None = Field(
        None, description="Why it was not applied: timeout, http 500, no reranker configured, …"
    )
