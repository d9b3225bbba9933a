"""Re-ordering the fused top-N: by a reranker's scores, and by maximal marginal relevance (MMR)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import numpy.typing as npt

from app.retrieval.scoring import tie_break_key


@dataclass(frozen=True, slots=True)
class Candidate:
    """What re-ordering needs of one fused result: its relevance and its tie-break fields."""

    id: uuid.UUID | str
    relevance: float
    created_at: datetime


@dataclass(frozen=True, slots=True)
class MmrPick:
    """One MMR choice: the candidate's index, its MMR score and its top cosine to earlier picks."""

    index: int
    score: float
    max_similarity: float


def order_by_scores(candidates: Sequence[Candidate], scores: Sequence[float]) -> list[int]:
    """Indices of candidates by score, best first; ties by created_at DESC, then id."""
    if len(scores) != len(candidates):
        raise ValueError(f"{len(scores)} scores for {len(candidates)} candidates")
    return sorted(
        range(len(candidates)),
        key=lambda i: tie_break_key(scores[i], candidates[i].created_at, candidates[i].id),
    )


def unit_relevance(scores: Sequence[float]) -> list[float]:
    """Scores min–max scaled to [0, 1], the cosine's scale (all equal: all 1).

    Fused scores crowd into a narrow band (RRF gives an item ranked 10th by both legs 0.87) and a
    reranker's may be raw logits; spread over the pool, relevance weighs as much as similarity.
    """
    if not scores:
        return []
    low, high = min(scores), max(scores)
    span = high - low
    return [(s - low) / span if span > 0 else 1.0 for s in scores]


def cosine_matrix(vectors: Sequence[npt.NDArray[np.float32] | None]) -> npt.NDArray[np.float64]:
    """Pairwise cosine similarity; a candidate without a vector is similar to nothing (0)."""
    dim = next((len(v) for v in vectors if v is not None), 0)
    matrix = np.zeros((len(vectors), dim), dtype=np.float64)
    for row, vector in enumerate(vectors):
        if vector is not None:
            norm = float(np.linalg.norm(vector))
            if norm > 0:
                matrix[row] = np.asarray(vector, dtype=np.float64) / norm
    similarity: npt.NDArray[np.float64] = matrix @ matrix.T
    return similarity


def query_cosines(
    query_vector: npt.NDArray[np.float32], vectors: Sequence[npt.NDArray[np.float32] | None]
) -> list[float] | None:
    """Cosine of each vector to the query; None when a vector is missing (relevance must come from elsewhere)."""
    if any(v is None for v in vectors):
        return None
    q = np.asarray(query_vector, dtype=np.float64)
    q_norm = float(np.linalg.norm(q))
    out = []
    for v in vectors:
        assert v is not None
        norm = float(np.linalg.norm(v)) * q_norm
        out.append(float(np.dot(q, np.asarray(v, dtype=np.float64)) / norm) if norm > 0 else 0.0)
    return out


def mmr_order(
    candidates: Sequence[Candidate], similarity: npt.NDArray[np.float64], diversity: float
) -> list[MmrPick]:
    """Greedy MMR over candidates given best first: the first stays first, then each step picks the
    argmax of (1 − diversity) · relevance − diversity · max(0, highest cosine to the picks so far).

    Relevance should be on the cosine's scale (the query cosine, or unit_relevance of other scores).
    Unlikeness earns nothing (negative cosines count as 0): diversity demotes resemblance, it does
    not promote what is off-topic. Each pick depends only on the earlier ones, so a shorter page is
    a prefix of a longer one; equal MMR scores fall to created_at DESC, then id.
    """
    n = len(candidates)
    if similarity.shape != (n, n):
        raise ValueError(f"similarity is {similarity.shape}, expected ({n}, {n})")
    if n == 0:
        return []
    max_similarity = [0.0] * n

    def mmr(i: int) -> float:
        return (1.0 - diversity) * candidates[i].relevance - diversity * max_similarity[i]

    picks = [MmrPick(0, mmr(0), 0.0)]
    remaining = set(range(1, n))
    while True:
        last = picks[-1].index
        for i in remaining:
            max_similarity[i] = max(max_similarity[i], float(similarity[i, last]))
        if not remaining:
            return picks
        best = min(remaining, key=lambda i: tie_break_key(mmr(i), candidates[i].created_at, candidates[i].id))
        picks.append(MmrPick(best, mmr(best), max_similarity[best]))
        remaining.discard(best)
