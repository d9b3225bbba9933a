"""Rank fusion of retrieval legs: reciprocal rank fusion, weighted score fusion, and adaptive fusion."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import chain

# Where an item stood in one leg: (competition rank, raw score, index in the leg's list); None
# where the leg did not return it.
_Slot = tuple[int, float, int] | None


class Leg:
    """One leg's results, best first: ids and raw scores, each item's rank and first position.

    Built as soon as the leg's rows arrive, so a search prepares its keyword leg while the query
    embedding is still being computed.

    Ranks are competition ranks (1, 2, 2, 4): items a leg cannot tell apart (equal raw scores,
    e.g. identical text) share a rank, so fusion does not invent a difference between them and
    the documented tie order (created_at DESC, id ASC) decides. A repeat of an item is ignored.
    """

    __slots__ = ("ids", "positions", "scores")

    def __init__(self, ids: Sequence[str], scores: Sequence[float]) -> None:
        self.ids = ids
        self.scores = scores
        positions: dict[str, tuple[int, float, int]] = {}
        rank = 0
        previous: float | None = None
        for position, (item_id, raw) in enumerate(zip(ids, scores, strict=True)):
            if previous is None or raw != previous:
                rank = position + 1
                previous = raw
            if item_id not in positions:
                positions[item_id] = (rank, raw, position)
        self.positions = positions


class FusedHit:
    """A fused result: normalised score plus where it stood in each leg.

    `ranks` and `raw_scores` are looked up in the legs when read: a search fuses ~150 candidates
    and shows 10, so a hit keeps only its id, its score and the legs it was fused from.
    """

    __slots__ = ("_legs", "id", "score")

    def __init__(self, id: str, score: float, legs: Mapping[str, Leg]) -> None:
        self.id = id
        self.score = score
        self._legs = legs

    def _slots(self) -> list[tuple[str, _Slot]]:
        return [(name, leg.positions.get(self.id)) for name, leg in self._legs.items()]

    @property
    def ranks(self) -> dict[str, int | None]:
        """Each leg's competition rank of this item (None: not returned by that leg)."""
        return {leg: s[0] if s is not None else None for leg, s in self._slots()}

    @property
    def raw_scores(self) -> dict[str, float | None]:
        """Each leg's raw score of this item (None: not returned by that leg)."""
        return {leg: s[1] if s is not None else None for leg, s in self._slots()}

    @property
    def legs_found(self) -> list[str]:
        """The legs that returned this item, in leg order."""
        return [leg for leg, s in self._slots() if s is not None]


def _item_ids(legs: Mapping[str, Leg]) -> list[str]:
    """Every item once, in first-seen order (legs in order, each best first)."""
    return list(dict.fromkeys(chain.from_iterable(leg.positions for leg in legs.values())))


def fuse_rrf(
    legs: Mapping[str, Leg], weights: Mapping[str, float], *, k: int = 60, depth: int
) -> list[FusedHit]:
    """Σ wᵢ/(k + rankᵢ), a missing item taking rank depth + 1, divided by the best possible Σ wᵢ/(k + 1).

    `depth` is how many hits each leg was asked for: an item a leg did not return ranks below
    everything it did. Hits come in first-seen order: callers order them with
    scoring.tie_break_key, the one tie order.
    """
    # Per item, the legs' terms are added left to right in leg order; with the two legs there
    # are, that is bit for bit what sum() gave (Python 3.12's compensated sum differs only from
    # 3 terms on).
    terms = [(weights[name], leg.positions) for name, leg in legs.items()]
    best = sum(w / (k + 1) for w, _ in terms)
    hits = []
    for item_id in _item_ids(legs):
        total = 0.0
        for w, positions in terms:
            s = positions.get(item_id)
            total += w / (k + (s[0] if s is not None else depth + 1))
        hits.append(FusedHit(item_id, total / best if best > 0 else 0.0, legs))
    return hits


def _weighted_sums(
    legs: Mapping[str, Leg], terms: Sequence[tuple[float, Sequence[float]]]
) -> dict[str, float]:
    """Per item, 0.0 plus each leg's weight times its value at the item's first position, in leg order.

    A leg that did not return an item adds nothing, which is what adding weight · 0.0 did
    (x + ±0.0 is x), so each leg adds its terms in one pass over its own items.
    """
    totals = dict.fromkeys(_item_ids(legs), 0.0)
    for (w, values), leg in zip(terms, legs.values(), strict=True):
        for item_id, (_, _, position) in leg.positions.items():
            totals[item_id] += w * values[position]
    return totals


def fuse_weighted(legs: Mapping[str, Leg], weights: Mapping[str, float]) -> list[FusedHit]:
    """Σ wᵢ · scoreᵢ / Σ wᵢ (missing = 0): with 0.7/0.3 and both legs, exactly 0.7·vector + 0.3·keyword.

    Hits come in first-seen order: callers order them with scoring.tie_break_key, the one tie order.
    """
    total_weight = sum(weights[name] for name in legs)
    clamped = [[max(0.0, min(1.0, raw)) for raw in leg.scores] for leg in legs.values()]
    totals = _weighted_sums(legs, [(weights[name], c) for name, c in zip(legs, clamped, strict=True)])
    return [
        FusedHit(item_id, total / total_weight if total_weight > 0 else 0.0, legs)
        for item_id, total in totals.items()
    ]


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
    spread = math.sqrt(sum([(s - mean) ** 2 for s in scores]) / len(scores))
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
    legs: Mapping[str, Leg], weights: Mapping[str, float], *, depth: int
) -> tuple[list[FusedHit], dict[str, float]]:
    """Convex combination of the legs' normalised scores with per-query shares; returns hits and shares.

    Legs hold up to `depth` hits, best first: cosines for semantic, mapped keyword scores for
    keyword (fusion works on the BM25 scores behind them). A leg absent from `legs` has share 0;
    an item a leg did not return scores 0 there. Hits come in first-seen order (see fuse_rrf).
    """
    keyword_scores = [unmap_keyword_score(raw) for raw in legs["keyword"].scores] if "keyword" in legs else []
    semantic_scores = list(legs["semantic"].scores) if "semantic" in legs else []
    if "semantic" in legs and "keyword" in legs:
        shares = adaptive_shares(semantic_scores, keyword_scores, weights)
    else:
        shares = {leg: 1.0 for leg in legs}
    leg_scores = {"keyword": keyword_scores, "semantic": semantic_scores}
    # Per leg, the normalised value of each position; an item takes the one of its first position.
    terms = [
        (shares[name], _normalised(leg_scores.get(name) or list(leg.scores), depth))
        for name, leg in legs.items()
    ]
    totals = _weighted_sums(legs, terms)
    return [FusedHit(item_id, total, legs) for item_id, total in totals.items()], shares
