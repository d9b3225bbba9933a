"""Per-scope retrieval settings: validation, butler.toml import, and resolution for a request."""

from __future__ import annotations

import re
import tomllib
from typing import Annotated, Any

import asyncpg
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.errors import ApiError, model_error_details
from app.infra.config import MAX_RERANK_TOP_N
from app.infra.db import Database
from app.input_rules import InputRuleError, Integer, Number, check_toml_text
from app.repositories.scopes import get_scope_settings, put_scope_settings
from app.retrieval.fusion import FUSION_NAMES, K_BOUNDS, WEIGHT_BOUNDS
from app.retrieval.scoring import DEFAULT_RECALL_WEIGHTS, RecallWeights

# A scope is a name in URLs and butler.toml files alike: the API path and the CLI import agree.
SCOPE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"
MAX_SCOPE_CHARS = 64


def check_scope_name(scope: str) -> None:
    """422 unless scope is a valid scope name."""
    if not re.fullmatch(SCOPE_PATTERN, scope) or len(scope) > MAX_SCOPE_CHARS:
        raise ApiError(
            422,
            "validation_error",
            f"invalid scope name {scope!r}: letters, digits, '_', '.', ':', '-' (max {MAX_SCOPE_CHARS})",
        )


class ScoreWeights(BaseModel):
    """memory_recall composite weights."""

    model_config = ConfigDict(extra="forbid")
    relevance: Number = Field(
        DEFAULT_RECALL_WEIGHTS.relevance,
        ge=0,
        le=10,
        description="Weight of relevance (hybrid search score).",
    )
    importance: Number = Field(
        DEFAULT_RECALL_WEIGHTS.importance, ge=0, le=10, description="Weight of importance/10."
    )
    recency: Number = Field(
        DEFAULT_RECALL_WEIGHTS.recency, ge=0, le=10, description="Weight of recency of last reference."
    )
    confidence: Number = Field(
        DEFAULT_RECALL_WEIGHTS.confidence, ge=0, le=10, description="Weight of effective confidence."
    )

    def weights(self) -> RecallWeights:
        """These weights as the scoring function takes them."""
        return RecallWeights(self.relevance, self.importance, self.recency, self.confidence)


class FusionWeightSettings(BaseModel):
    """Search fusion weights and RRF k for a scope."""

    model_config = ConfigDict(extra="forbid")
    semantic: Number | None = Field(
        None, ge=WEIGHT_BOUNDS[0], le=WEIGHT_BOUNDS[1], description="Weight of the semantic leg."
    )
    keyword: Number | None = Field(
        None, ge=WEIGHT_BOUNDS[0], le=WEIGHT_BOUNDS[1], description="Weight of the keyword leg."
    )
    k: Integer | None = Field(None, ge=K_BOUNDS[0], le=K_BOUNDS[1], description="RRF k.")


class ScopeSettings(BaseModel):
    """Everything a scope can override; unset fields fall back to the service settings."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "score_weights": {"relevance": 0.6, "importance": 0.1, "recency": 0.2, "confidence": 0.1},
                    "fusion": "rrf",
                    "fusion_weights": {"semantic": 1.0, "keyword": 1.0, "k": 60},
                    "half_life_days": 30,
                    "rerank": True,
                    "rerank_top_n": 30,
                }
            ]
        },
    )
    score_weights: ScoreWeights | None = Field(None, description="memory_recall composite weights.")
    fusion: str | None = Field(
        None,
        pattern=f"^({'|'.join(FUSION_NAMES)})$",
        description="Default fusion: adaptive, rrf or weighted.",
    )
    fusion_weights: FusionWeightSettings | None = Field(None, description="Search fusion weights and RRF k.")
    half_life_days: Number | None = Field(
        None, gt=0, le=36500, description="Half-life of dated memory files (YYYY-MM-DD.md), in days."
    )
    recency_half_life_days: Number | None = Field(
        None, gt=0, le=36500, description="Half-life of the recall recency signal, in days (default 7)."
    )
    rerank: bool | None = Field(
        None, description="Rerank this scope's searches unless a request says otherwise."
    )
    rerank_top_n: Integer | None = Field(
        None,
        ge=1,
        le=MAX_RERANK_TOP_N,
        description="How many fused results are reranked (default RECALLD_RERANK_TOP_N).",
    )
    single_valued_predicates: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        None,
        max_length=256,
        description="Predicates with one value at a time: a new fact with one of them (and a subject) "
        "supersedes the scope's active facts of the same subject and predicate.",
    )
    merge_near_duplicates: bool | None = Field(
        None,
        description="Answer a write that is a near-duplicate (`similar_to`) of an active memory with that "
        "memory, as an exact duplicate is, instead of storing it.",
    )


_MEMORY_KEYS = ("single_valued_predicates", "merge_near_duplicates")


def parse_butler_toml(text: str) -> tuple[str | None, ScopeSettings]:
    """Read `[butler] name` and `[butler.memory.retrieval]` from a butler.toml text."""
    try:
        check_toml_text(text)  # tomllib recurses per nesting level: bounded before it runs
        doc = tomllib.loads(text)
    except (InputRuleError, tomllib.TOMLDecodeError) as exc:
        raise ApiError(422, "validation_error", f"invalid TOML: {exc}") from exc
    butler = doc.get("butler")
    if not isinstance(butler, dict):
        raise ApiError(422, "validation_error", "butler.toml needs a [butler] table")
    name = butler.get("name")
    memory = butler.get("memory")
    retrieval = memory.get("retrieval") if isinstance(memory, dict) else None
    # How the butler's memories stay true is a memory setting, not a retrieval one: it may sit in
    # [butler.memory] beside the retrieval table.
    truth = {k: memory[k] for k in _MEMORY_KEYS if isinstance(memory, dict) and k in memory}
    if truth:
        retrieval = {**(retrieval if isinstance(retrieval, dict) else {}), **truth}
    if not isinstance(retrieval, dict):
        # Importing it would silently reset every setting of the scope to the defaults.
        raise ApiError(
            422,
            "validation_error",
            "butler.toml has no [butler.memory.retrieval] table (nor single_valued_predicates or "
            "merge_near_duplicates in [butler.memory]); to clear a scope's settings PUT {} as JSON",
        )
    try:
        return (str(name) if name is not None else None), ScopeSettings.model_validate(retrieval)
    except ValidationError as exc:
        raise ApiError(
            422,
            "validation_error",
            "invalid [butler.memory.retrieval] settings",
            model_error_details(exc),
        ) from exc


async def store_scope_settings(
    db: Database, *, tenant_id: str, scope: str, settings: ScopeSettings
) -> ScopeSettings:
    """Persist a scope's settings (replacing earlier ones)."""

    async def work(conn: asyncpg.Connection) -> None:
        await put_scope_settings(
            conn, tenant_id=tenant_id, scope=scope, settings=settings.model_dump(exclude_none=True)
        )

    await db.run([tenant_id], work)
    return settings


async def read_scope_settings(db: Database, *, tenant_id: str, scope: str) -> ScopeSettings:
    """A scope's stored settings in a transaction of its own; empty when none stored."""
    async with db.transaction([tenant_id], readonly=True) as conn:
        return await load_scope_settings(conn, tenant_id=tenant_id, scope=scope)


async def load_scope_settings(
    conn: asyncpg.Connection, *, tenant_id: str, scope: str | None
) -> ScopeSettings:
    """A scope's settings inside the caller's open tenant transaction; empty when none stored."""
    if scope is None:
        return ScopeSettings()
    stored: dict[str, Any] | None = await get_scope_settings(conn, tenant_id=tenant_id, scope=scope)
    return ScopeSettings.model_validate(stored) if stored else ScopeSettings()
