"""The post-fusion stages of search: a reranker over the fused top-N, then MMR diversity."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from app.embeddings.base import Vector
from app.infra.config import Settings
from app.repositories.candidates import CandidateText, candidate_texts
from app.rerank.base import Reranker, rerank
from app.retrieval.hits import Hit
from app.retrieval.reorder import (
    Candidate,
    cosine_matrix,
    mmr_order,
    order_by_scores,
    query_cosines,
    unit_relevance,
)


@dataclass(frozen=True, slots=True)
class ReorderPlan:
    """Whether to rerank and diversify, and how many fused results both look at."""

    rerank: bool
    top_n: int
    diversity: float

    @property
    def active(self) -> bool:
        """Whether any post-fusion stage runs."""
        return self.rerank or self.diversity > 0


@dataclass(slots=True)
class Reordering:
    """The new order of the top-N and what each stage said about each candidate."""

    order: list[int]
    # By candidate id: what the reranker and MMR said, for score_breakdown.
    rerank: dict[uuid.UUID, dict[str, float | int]] = field(default_factory=dict)
    mmr: dict[uuid.UUID, dict[str, float]] = field(default_factory=dict)
    report: dict[str, Any] | None = None


async def load_texts(
    conn: asyncpg.Connection, tenant_ids: Sequence[str], candidates: Sequence[Hit], plan: ReorderPlan
) -> dict[uuid.UUID, CandidateText]:
    """What the stages need of the top-N, inside the caller's tenant transaction."""
    if not plan.active or not candidates:
        return {}
    return await candidate_texts(
        conn,
        tenant_ids=tenant_ids,
        ids=[c.id for c in candidates],
        content=plan.rerank,
        embedding=plan.diversity > 0,
    )


async def reorder(
    reranker: Reranker | None,
    settings: Settings,
    query: str,
    hits: Sequence[Hit],
    texts: dict[uuid.UUID, CandidateText],
    plan: ReorderPlan,
    query_vector: Vector | None,
) -> Reordering:
    """Rerank then diversify the hits (the fused top-N, best first); never raises for a reranker."""
    candidates = [Candidate(h.id, h.score, h.created_at) for h in hits]
    result = Reordering(order=list(range(len(candidates))))
    relevance = [c.relevance for c in candidates]
    reranked = False
    if plan.rerank:
        contents = [(texts.get(h.id) or CandidateText("", None)).content or "" for h in hits]
        outcome = await rerank(reranker, query, contents, settings.rerank_timeout_seconds)
        result.report = {
            "applied": outcome.scores is not None,
            "provider": outcome.provider,
            "top_n": len(candidates),
            "error": outcome.error,
        }
        if outcome.scores is not None:
            reranked = True
            relevance = outcome.scores
            result.order = order_by_scores(candidates, relevance)
            for rank, index in enumerate(result.order, start=1):
                result.rerank[hits[index].id] = {"score": round(relevance[index], 6), "rank": rank}
    if plan.diversity > 0 and len(candidates) > 1:
        pool = [candidates[i] for i in result.order]
        vectors = [(texts.get(hits[i].id) or CandidateText(None, None)).embedding for i in result.order]
        mmr_relevance = _mmr_relevance([relevance[i] for i in result.order], vectors, query_vector, reranked)
        picks = mmr_order(
            [Candidate(c.id, r, c.created_at) for c, r in zip(pool, mmr_relevance, strict=True)],
            cosine_matrix(vectors),
            plan.diversity,
        )
        result.order = [result.order[p.index] for p in picks]
        for pick, index in zip(picks, result.order, strict=True):
            result.mmr[hits[index].id] = {
                "score": round(pick.score, 6),
                "max_similarity": round(pick.max_similarity, 6),
            }
    return result


def _mmr_relevance(
    scores: list[float], vectors: list[Vector | None], query_vector: Vector | None, reranked: bool
) -> list[float]:
    # MMR compares relevance with a cosine, so the classic choice is the query's cosine to each
    # memory (same space, same scale). Fused RRF scores crowd into a narrow band and a reranker's
    # scale is its own: those are min–max scaled instead (reranked, or no query vector).
    if not reranked and query_vector is not None:
        cosines = query_cosines(query_vector, vectors)
        if cosines is not None:
            return cosines
    return unit_relevance(scores)
