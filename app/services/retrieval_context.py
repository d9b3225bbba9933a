"""What a search or recall knows for its whole life: opened once per request, read by every step."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg

from app.auth import Principal
from app.embeddings.base import Vector
from app.infra.config import Settings
from app.infra.db import Database
from app.retrieval import calibration
from app.retrieval.fusion import FUSIONS
from app.retrieval.language import unreadable_script
from app.retrieval.query import ParsedQuery, parse_query
from app.retrieval.scoring import DEFAULT_RECALL_WEIGHTS, RecallWeights
from app.services.query_embedding import query_embedding
from app.services.requests import FusionWeights, RecallWeightOverrides
from app.services.scopes import ScopeSettings, load_scope_settings
from app.services.tenants import resolve_tenants
from app.services.timings import Timings
from app.state import ServiceState


@dataclass(frozen=True, slots=True)
class Asked:
    """The retrieval settings a request set itself (None: not set, the scope's or the default applies)."""

    scope: str | None = None
    fusion: str | None = None
    weights: FusionWeights | None = None
    # Code-only searches have their own default fusion and weights.
    code: bool = False
    half_life_days: float | None = None
    min_score: float | None = None
    min_confidence: float | None = None
    rerank: bool | None = None
    rerank_top_n: int | None = None
    diversity: float | None = None
    score_weights: RecallWeightOverrides | None = None


@dataclass(frozen=True, slots=True)
class RetrievalSettings:
    """Every retrieval setting of one request, resolved: request › scope › service default."""

    fusion: str
    # The legs' fusion weights ("semantic", "keyword") and RRF's k.
    weights: dict[str, float]
    k: int
    half_life_days: float
    min_score: float
    min_confidence: float
    recency_half_life_days: float
    recall_weights: RecallWeights
    rerank: bool
    rerank_top_n: int
    diversity: float


def first[T](*values: T | None, default: T) -> T:
    """The first value that is set, else the default: how every request › scope › default is read."""
    return next((v for v in values if v is not None), default)


def resolve_settings(defaults: Settings, scope: ScopeSettings, asked: Asked) -> RetrievalSettings:
    """The one place where a request's settings, its scope's and the service defaults are combined."""
    # Code search keeps rrf with the code seed's weights: adaptive fusion was measured on prose
    # and conversations only.
    fusion: str = first(asked.fusion, scope.fusion, default="rrf" if asked.code else defaults.default_fusion)
    if FUSIONS[fusion].own_default_weights:
        semantic, keyword = defaults.weighted_vector_weight, defaults.weighted_keyword_weight
    elif asked.code:
        semantic, keyword = defaults.code_semantic_weight, defaults.code_keyword_weight
    else:
        semantic, keyword = defaults.semantic_weight, defaults.keyword_weight
    scoped, wanted = scope.fusion_weights, asked.weights
    recall = scope.score_weights.weights() if scope.score_weights else DEFAULT_RECALL_WEIGHTS
    override = asked.score_weights or RecallWeightOverrides()
    return RetrievalSettings(
        fusion=fusion,
        weights={
            "semantic": first(
                wanted.semantic if wanted else None, scoped.semantic if scoped else None, default=semantic
            ),
            "keyword": first(
                wanted.keyword if wanted else None, scoped.keyword if scoped else None, default=keyword
            ),
        },
        k=first(wanted.k if wanted else None, scoped.k if scoped else None, default=defaults.rrf_k),
        half_life_days=first(
            asked.half_life_days, scope.half_life_days, default=defaults.decay_half_life_days
        ),
        min_score=first(asked.min_score, default=defaults.min_score),
        min_confidence=first(asked.min_confidence, default=defaults.min_confidence),
        recency_half_life_days=first(scope.recency_half_life_days, default=defaults.recency_half_life_days),
        recall_weights=RecallWeights(
            relevance=first(override.relevance, default=recall.relevance),
            importance=first(override.importance, default=recall.importance),
            recency=first(override.recency, default=recall.recency),
            confidence=first(override.confidence, default=recall.confidence),
        ),
        rerank=first(asked.rerank, scope.rerank, default=defaults.rerank_default),
        rerank_top_n=first(asked.rerank_top_n, scope.rerank_top_n, default=defaults.rerank_top_n),
        diversity=first(asked.diversity, default=0.0),
    )


@dataclass(frozen=True, slots=True)
class RetrievalContext:
    """One search or recall: who asks, over which tenants, what, with which settings, and since when."""

    state: ServiceState
    principal: Principal
    tenant_ids: list[str]
    parsed: ParsedQuery
    # The query's embedding, computed in the background while the keyword leg runs (None: not wanted).
    vector: asyncio.Task[Vector | None] | None
    asked: Asked
    # Request › default until with_scope has read the scope's stored settings.
    settings: RetrievalSettings
    now: datetime
    timings: Timings

    async def with_scope(self, conn: asyncpg.Connection) -> RetrievalContext:
        """This context with the scope's stored settings applied (inside the tenant transaction)."""
        if self.asked.scope is None:
            return self
        scope = await load_scope_settings(conn, tenant_id=self.principal.tenant_id, scope=self.asked.scope)
        return dataclasses.replace(self, settings=resolve_settings(self.state.settings, scope, self.asked))

    def score_floor(self, calibrated: bool, best: float = 0.0) -> float:
        """min_score as asked, else the default of the scale the scores are on (calibrated or not).

        On the calibrated scale a search's default depends on its best score (`best`, see
        `calibration.default_floor`); without one it is the floor itself.
        """
        if self.asked.min_score is None and calibrated:
            return calibration.default_floor(self.state.settings.calibrated_min_score, best)
        return self.settings.min_score

    async def embedding_used(self) -> bool:
        """Whether the request got a query embedding (false without an embedder)."""
        return self.vector is not None and await self.vector is not None


def semantic_blind_spot(state: ServiceState, query: str) -> str | None:
    """Why the embedding model cannot read this query (its script is not one it declares), else None."""
    if state.embedder is None:
        return None
    script = unreadable_script(query, state.embedder.scripts)
    if script is None:
        return None
    return f"query script {script} not covered by {state.embedder.identity.model}"


@asynccontextmanager
async def open_retrieval(
    state: ServiceState,
    db: Database,
    principal: Principal,
    *,
    text: str,
    tenants: Sequence[str] | None,
    all_tenants: bool,
    asked: Asked,
    embed: bool,
) -> AsyncIterator[RetrievalContext]:
    """The request's context; its query is embedded in the background when `embed` and the model can read it."""
    started = time.perf_counter()
    timings = Timings()
    tenant_ids = await resolve_tenants(db, principal, tenants, all_tenants)
    parsed = parse_query(text)
    wanted = (
        embed
        and state.embedder is not None
        and not parsed.is_empty
        and semantic_blind_spot(state, parsed.text) is None
    )
    async with query_embedding(
        state, parsed.text, timings, tenant_id=principal.tenant_id, wanted=wanted
    ) as vector:
        yield RetrievalContext(
            state=state,
            principal=principal,
            tenant_ids=tenant_ids,
            parsed=parsed,
            vector=vector,
            asked=asked,
            settings=resolve_settings(state.settings, ScopeSettings(), asked),
            now=datetime.now(UTC),
            timings=timings,
        )
    timings.add("total", started)
