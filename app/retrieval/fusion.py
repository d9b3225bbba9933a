"""Rank fusion of retrieval legs: reciprocal rank fusion, weighted score fusion, and adaptive fusion."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from app.retrieval.hits import Hit, Leg


def _first_seen(legs: Mapping[str, Leg]) -> dict[uuid.UUID, Hit]:
    """Every item once, in first-seen order (legs in order, each best first): the first leg's Hit."""
    found: dict[uuid.UUID, Hit] = {}
    for leg in legs.values():
        for hit in leg.hits:
            found.setdefault(hit.id, hit)
    return found


def _fused(legs: Mapping[str, Leg], hits: Sequence[Hit], scores: Sequence[float]) -> list[Hit]:
    """The hits with their fused scores and the legs they were fused from."""
    for hit, score in zip(hits, scores, strict=True):
        hit.fused = score
        hit.legs = legs
    return list(hits)


def fuse_rrf(legs: Mapping[str, Leg], weights: Mapping[str, float], *, k: int = 60, depth: int) -> list[Hit]:
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
    hits = _first_seen(legs)
    scores = []
    for item_id in hits:
        total = 0.0
        for w, positions in terms:
            s = positions.get(item_id)
            total += w / (k + (s[0] if s is not None else depth + 1))
        scores.append(total / best if best > 0 else 0.0)
    return _fused(legs, list(hits.values()), scores)


def _weighted_sums(
    legs: Mapping[str, Leg], terms: Sequence[tuple[float, Sequence[float]]]
) -> tuple[list[Hit], list[float]]:
    """Per item, 0.0 plus each leg's weight times its value at the item's first position, in leg order.

    A leg that did not return an item adds nothing, which is what adding weight · 0.0 did
    (x + ±0.0 is x), so each leg adds its terms in one pass over its own items.
    """
    hits = _first_seen(legs)
    totals = dict.fromkeys(hits, 0.0)
    for (w, values), leg in zip(terms, legs.values(), strict=True):
        for item_id, (_, _, position) in leg.positions.items():
            totals[item_id] += w * values[position]
    return list(hits.values()), list(totals.values())


def fuse_weighted(legs: Mapping[str, Leg], weights: Mapping[str, float]) -> list[Hit]:
    """Σ wᵢ · scoreᵢ / Σ wᵢ (missing = 0): with 0.7/0.3 and both legs, exactly 0.7·vector + 0.3·keyword.

    Hits come in first-seen order: callers order them with scoring.tie_break_key, the one tie order.
    """
    total_weight = sum(weights[name] for name in legs)
    clamped = [[max(0.0, min(1.0, raw)) for raw in leg.scores] for leg in legs.values()]
    hits, totals = _weighted_sums(legs, [(weights[name], c) for name, c in zip(legs, clamped, strict=True)])
    return _fused(legs, hits, [total / total_weight if total_weight > 0 else 0.0 for total in totals])


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
# Confidence moves the semantic share within these bounds.
ADAPTIVE_SHARE_BOUNDS = (0.2, 0.8)
# Then each leg's share is scaled by how much evidence it has for this query at all, on scales that
# mean the same for every query, so a leg with little evidence weighs little and one with none
# nothing. Semantic: the best cosine, from unrelated text (MiniLM gives about 0.2 to a sentence on
# another subject) to a near paraphrase. Keyword: the best BM25 score's share of the most the
# query's own terms could score ((k1 + 1) · Σ idf, a term no memory holds included): a best hit
# that matched only the query's common words, none of its rare ones, reaches a small share.
# Chosen offline over the dumped legs of seven sets (docs/benchmarks.md, "Per-query leg weights"
# and "SciFact and the evidence ramps"): full semantic evidence from a cosine of 0.45, since a
# cosine ramp up to 0.9 cost SciFact 0.013 nDCG (its claims' cosines are those of conversation
# questions, but its semantic leg is nearly as good as its keyword leg).
SEMANTIC_EVIDENCE_COSINES = (0.2, 0.45)
KEYWORD_EVIDENCE_SHARE = (0.05, 0.15)
# Why a leg that ran got no weight (score_breakdown's legs_skipped).
NO_KEYWORD_MATCH = "no memory in scope matches a query term"
KEYWORD_TOO_LITTLE = (
    f"its best match scored under {KEYWORD_EVIDENCE_SHARE[0]:.0%} of what the query's terms could "
    "(the rarest terms matched nothing)"
)
NO_SEMANTIC_EVIDENCE = (
    f"no memory in scope is nearer the query than unrelated text (cosine {SEMANTIC_EVIDENCE_COSINES[0]})"
)


def _ramp(value: float, low: float, high: float) -> float:
    return min(1.0, max(0.0, (value - low) / (high - low)))


def _top_z(scores: Sequence[float]) -> float:
    if len(scores) < 2:
        return 0.0
    mean = sum(scores) / len(scores)
    spread = math.sqrt(sum([(s - mean) ** 2 for s in scores]) / len(scores))
    return (scores[0] - mean) / spread if spread > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Shares:
    """Each leg's share of an adaptive fusion (summing to 1), and why a leg that ran has none."""

    weights: dict[str, float]
    silenced: dict[str, str] = field(default_factory=dict)


def adaptive_shares(
    semantic_scores: Sequence[float],
    keyword_scores: Sequence[float],
    weights: Mapping[str, float],
    *,
    keyword_ceiling: float | None = None,
) -> Shares:
    """Per-query leg shares from each leg's confidence and evidence and the configured weights.

    semantic_scores are cosines, keyword_scores BM25 scores, each best first; keyword_ceiling is
    the most BM25 could give for the query's terms (None: unknown, the keyword evidence counts as
    full). With equal weights and full evidence the semantic share is 0.5 ± 0.3 · (semantic
    confidence − keyword confidence); each share is then scaled by its leg's evidence. A leg that
    found nothing, or whose evidence is nil, gets no share and the reason.
    """
    semantic = _ramp(semantic_scores[0], *SEMANTIC_CONFIDENCE_COSINES) if semantic_scores else 0.0
    keyword = _ramp(_top_z(keyword_scores), *KEYWORD_CONFIDENCE_Z) if keyword_scores else 0.0
    low, high = ADAPTIVE_SHARE_BOUNDS
    share = low + (high - low) * (0.5 + 0.5 * (semantic - keyword))
    semantic_evidence = _ramp(semantic_scores[0], *SEMANTIC_EVIDENCE_COSINES) if semantic_scores else 0.0
    keyword_evidence = 0.0
    if keyword_scores:
        reached = keyword_scores[0] / keyword_ceiling if keyword_ceiling else 1.0
        keyword_evidence = _ramp(reached, *KEYWORD_EVIDENCE_SHARE)
    silenced = {}
    if keyword_evidence <= 0:
        silenced["keyword"] = KEYWORD_TOO_LITTLE if keyword_scores else NO_KEYWORD_MATCH
    if semantic_evidence <= 0:
        silenced["semantic"] = NO_SEMANTIC_EVIDENCE
    weighted_semantic = weights.get("semantic", 1.0) * share * semantic_evidence
    weighted_keyword = weights.get("keyword", 1.0) * (1.0 - share) * keyword_evidence
    total = weighted_semantic + weighted_keyword
    if total <= 0:
        # Neither leg has evidence (or both are weighted 0): their confidence alone decides.
        weighted_semantic = weights.get("semantic", 1.0) * share
        weighted_keyword = weights.get("keyword", 1.0) * (1.0 - share)
        total = weighted_semantic + weighted_keyword
        silenced = {}
        if total <= 0:
            return Shares({"semantic": 0.5, "keyword": 0.5})
    return Shares({"semantic": weighted_semantic / total, "keyword": weighted_keyword / total}, silenced)


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
) -> tuple[list[Hit], Shares]:
    """Convex combination of the legs' normalised scores with per-query shares; returns hits and shares.

    Legs hold up to `depth` hits, best first: cosines for semantic, mapped keyword scores for
    keyword (fusion works on the BM25 scores behind them; the keyword leg's ceiling, when known,
    is its query's). A leg absent from `legs` has share 0; an item a leg did not return scores 0
    there. Hits come in first-seen order (see fuse_rrf).
    """
    keyword_scores = [unmap_keyword_score(raw) for raw in legs["keyword"].scores] if "keyword" in legs else []
    semantic_scores = list(legs["semantic"].scores) if "semantic" in legs else []
    if "semantic" in legs and "keyword" in legs:
        shares = adaptive_shares(
            semantic_scores, keyword_scores, weights, keyword_ceiling=legs["keyword"].ceiling
        )
    else:
        shares = Shares({leg: 1.0 for leg in legs})
    leg_scores = {"keyword": keyword_scores, "semantic": semantic_scores}
    # Per leg, the normalised value of each position; an item takes the one of its first position.
    terms = [
        (shares.weights[name], _normalised(leg_scores.get(name) or list(leg.scores), depth))
        for name, leg in legs.items()
    ]
    hits, totals = _weighted_sums(legs, terms)
    return _fused(legs, hits, totals), shares


# The fusions a request, a scope or the service default may name: the one list of their names.
FusionName = Literal["adaptive", "rrf", "weighted"]
FUSION_NAMES: tuple[FusionName, ...] = get_args(FusionName)
# Bounds of a leg's weight and of RRF's k, wherever they are set (request, scope).
WEIGHT_BOUNDS = (0.0, 100.0)
K_BOUNDS = (1, 1000)

FuseFunction = Callable[[Mapping[str, Leg], Mapping[str, float], int, int], tuple[list[Hit], Shares]]


@dataclass(frozen=True, slots=True)
class Fusion:
    """A fusion: fuse(legs, weights, k, depth) -> (hits, the weights it used), and its defaults."""

    fuse: FuseFunction
    # True: the fusion has default weights of its own (RECALLD_WEIGHTED_*_WEIGHT), not the legs'.
    own_default_weights: bool = False


def _rrf(
    legs: Mapping[str, Leg], weights: Mapping[str, float], k: int, depth: int
) -> tuple[list[Hit], Shares]:
    return fuse_rrf(legs, weights, k=k, depth=depth), Shares(dict(weights))


def _weighted(
    legs: Mapping[str, Leg], weights: Mapping[str, float], k: int, depth: int
) -> tuple[list[Hit], Shares]:
    return fuse_weighted(legs, weights), Shares(dict(weights))


def _adaptive(
    legs: Mapping[str, Leg], weights: Mapping[str, float], k: int, depth: int
) -> tuple[list[Hit], Shares]:
    return fuse_adaptive(legs, weights, depth=depth)


FUSIONS: dict[str, Fusion] = {
    "adaptive": Fusion(_adaptive),
    "rrf": Fusion(_rrf),
    "weighted": Fusion(_weighted, own_default_weights=True),
}
