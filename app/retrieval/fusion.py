"""Rank fusion of retrieval legs: reciprocal rank fusion and weighted score fusion."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LegHit:
    """One result of one leg, legs being ranked best first."""

    id: str
    raw_score: float


@dataclass(frozen=True, slots=True)
class FusedHit:
    """A fused result: normalised score plus where it stood in each leg."""

    id: str
    score: float
    ranks: dict[str, int | None]
    raw_scores: dict[str, float | None]


def _collect(
    legs: Mapping[str, Sequence[LegHit]],
) -> tuple[list[str], dict[str, dict[str, tuple[int, float]]]]:
    """Each item's (rank, raw score) per leg.

    Ranks are competition ranks (1, 2, 2, 4): items a leg cannot tell apart (equal raw scores,
    e.g. identical text) share a rank, so fusion does not invent a difference between them and
    the documented tie order (created_at DESC, id ASC) decides.
    """
    order: list[str] = []
    positions: dict[str, dict[str, tuple[int, float]]] = {}
    for leg, hits in legs.items():
        rank = 0
        previous: float | None = None
        for position, hit in enumerate(hits, start=1):
            if previous is None or hit.raw_score != previous:
                rank = position
                previous = hit.raw_score
            if hit.id not in positions:
                positions[hit.id] = {}
                order.append(hit.id)
            positions[hit.id].setdefault(leg, (rank, hit.raw_score))
    return order, positions


def _hit(
    item_id: str, score: float, legs: Mapping[str, Sequence[LegHit]], found: dict[str, tuple[int, float]]
) -> FusedHit:
    return FusedHit(
        id=item_id,
        score=score,
        ranks={leg: found[leg][0] if leg in found else None for leg in legs},
        raw_scores={leg: found[leg][1] if leg in found else None for leg in legs},
    )


def fuse_rrf(
    legs: Mapping[str, Sequence[LegHit]], weights: Mapping[str, float], *, k: int = 60, limit: int
) -> list[FusedHit]:
    """Σ wᵢ/(k + rankᵢ), a missing item taking rank limit + 1, divided by the best possible Σ wᵢ/(k + 1).

    Hits come in first-seen order: callers order them with scoring.tie_break_key, the one tie order.
    """
    order, positions = _collect(legs)
    best = sum(weights[leg] / (k + 1) for leg in legs)
    hits = []
    for item_id in order:
        found = positions[item_id]
        total = sum(weights[leg] / (k + (found[leg][0] if leg in found else limit + 1)) for leg in legs)
        hits.append(_hit(item_id, total / best if best > 0 else 0.0, legs, found))
    return hits


def fuse_weighted(legs: Mapping[str, Sequence[LegHit]], weights: Mapping[str, float]) -> list[FusedHit]:
    """Σ wᵢ · scoreᵢ / Σ wᵢ (missing = 0): with 0.7/0.3 and both legs, exactly 0.7·vector + 0.3·keyword.

    Hits come in first-seen order: callers order them with scoring.tie_break_key, the one tie order.
    """
    order, positions = _collect(legs)
    total_weight = sum(weights[leg] for leg in legs)
    hits = []
    for item_id in order:
        found = positions[item_id]
        total = sum(weights[leg] * max(0.0, min(1.0, found[leg][1])) for leg in legs if leg in found)
        hits.append(_hit(item_id, total / total_weight if total_weight > 0 else 0.0, legs, found))
    return hits


def map_keyword_score(raw: float) -> float:
    """A non-negative BM25 / rank score mapped into [0, 1): raw / (1 + raw)."""
    return raw / (1.0 + raw) if raw > 0 else 0.0
