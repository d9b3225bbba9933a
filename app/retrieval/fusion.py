"""Rank fusion of retrieval legs: reciprocal rank fusion, weighted score fusion, and adaptive fusion."""

from __future__ import annotations

import math
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
    legs: Mapping[str, Sequence[LegHit]], weights: Mapping[str, float], *, k: int = 60, depth: int
) -> list[FusedHit]:
    """Σ wᵢ/(k + rankᵢ), a missing item taking rank depth + 1, divided by the best possible Σ wᵢ/(k + 1).

    `depth` is how many hits each leg was asked for: an item a leg did not return ranks below
    everything it did. Hits come in first-seen order: callers order them with
    scoring.tie_break_key, the one tie order.
    """
    order, positions = _collect(legs)
    best = sum(weights[leg] / (k + 1) for leg in legs)
    hits = []
    for item_id in order:
        found = positions[item_id]
        total = sum(weights[leg] / (k + (found[leg][0] if leg in found else depth + 1)) for leg in legs)
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


def unmap_keyword_score(mapped: float) -> float:
    """The BM25 score behind a mapped keyword score (the inverse of map_keyword_score)."""
    clamped = min(max(mapped, 0.0), 1.0 - 1e-12)  # finite even for a score that rounded to 1
    return clamped / (1.0 - clamped)


# Adaptive fusion: each leg's say for this query comes from how confident its own scores look.
# The semantic leg's evidence is the cosine of its best hit: sentence-embedding models give merely
# on-topic text about 0.5 and a near paraphrase about 0.9, whatever the corpus.
SEMANTIC_CONFIDENCE_COSINES = (0.5, 0.9)
# The keyword leg's evidence is how far its best BM25 score stands out from the rest of its list
# (z-score over the leg's hits): about 2 is a flat list where many documents match a common term
# equally, 8 a document matching the query's rare terms far better than any other.
KEYWORD_CONFIDENCE_Z = (2.0, 8.0)
# Evidence moves the semantic share within these bounds; only a leg that cannot read the query
# (language) is ever silenced completely.
ADAPTIVE_SHARE_BOUNDS = (0.2, 0.8)


def _ramp(value: float, low: float, high: float) -> float:
    return min(1.0, max(0.0, (value - low) / (high - low)))


def _top_z(scores: Sequence[float]) -> float:
    if len(scores) < 2:
        return 0.0
    mean = sum(scores) / len(scores)
    spread = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
    return (scores[0] - mean) / spread if spread > 0 else 0.0


def adaptive_shares(
    semantic_scores: Sequence[float], keyword_scores: Sequence[float], weights: Mapping[str, float]
) -> dict[str, float]:
    """Per-query leg shares (summing to 1) from each leg's confidence and the configured weights.

    semantic_scores are cosines, keyword_scores BM25 scores, each best first. With equal weights
    the semantic share is 0.5 ± 0.3 · (semantic confidence − keyword confidence).
    """
    semantic = _ramp(semantic_scores[0], *SEMANTIC_CONFIDENCE_COSINES) if semantic_scores else 0.0
    keyword = _ramp(_top_z(keyword_scores), *KEYWORD_CONFIDENCE_Z) if keyword_scores else 0.0
    low, high = ADAPTIVE_SHARE_BOUNDS
    share = low + (high - low) * (0.5 + 0.5 * (semantic - keyword))
    weighted_semantic = weights.get("semantic", 1.0) * share
    weighted_keyword = weights.get("keyword", 1.0) * (1.0 - share)
    total = weighted_semantic + weighted_keyword
    if total <= 0:
        return {"semantic": 0.5, "keyword": 0.5}
    return {"semantic": weighted_semantic / total, "keyword": weighted_keyword / total}


def _normalised(scores: Sequence[float], depth: int) -> list[float]:
    """Scores mapped to [0, 1] between the leg's floor and its best.

    A leg that filled its depth has more documents below its last hit, so that hit's score is
    what "not retrieved" is worth (min-max). A leg that returned fewer found everything it can
    match: its floor is a non-match, 0.
    """
    if not scores:
        return []
    best = scores[0]
    floor = scores[-1] if len(scores) >= depth else min(0.0, scores[-1])
    if best <= floor:
        return [1.0] * len(scores)
    return [(s - floor) / (best - floor) for s in scores]


def fuse_adaptive(
    legs: Mapping[str, Sequence[LegHit]], weights: Mapping[str, float], *, depth: int
) -> tuple[list[FusedHit], dict[str, float]]:
    """Convex combination of the legs' normalised scores with per-query shares; returns hits and shares.

    Legs hold up to `depth` hits, best first: cosines for semantic, mapped keyword scores for
    keyword (fusion works on the BM25 scores behind them). A leg absent from `legs` has share 0;
    an item a leg did not return scores 0 there. Hits come in first-seen order (see fuse_rrf).
    """
    order, positions = _collect(legs)
    keyword_scores = [unmap_keyword_score(h.raw_score) for h in legs.get("keyword", [])]
    semantic_scores = [h.raw_score for h in legs.get("semantic", [])]
    if "semantic" in legs and "keyword" in legs:
        shares = adaptive_shares(semantic_scores, keyword_scores, weights)
    else:
        shares = {leg: 1.0 for leg in legs}
    leg_scores = {"keyword": keyword_scores, "semantic": semantic_scores}
    by_leg: dict[str, dict[str, float]] = {}
    for leg, leg_hits in legs.items():
        values = _normalised(leg_scores.get(leg) or [h.raw_score for h in leg_hits], depth)
        by_leg[leg] = {}
        for hit, value in zip(leg_hits, values, strict=True):
            by_leg[leg].setdefault(hit.id, value)
    hits = []
    for item_id in order:
        total = sum(shares[leg] * by_leg[leg].get(item_id, 0.0) for leg in legs)
        hits.append(_hit(item_id, total, legs, positions[item_id]))
    return hits, shares
