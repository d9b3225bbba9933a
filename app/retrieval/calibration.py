"""The default fusion's calibrated score: the probability that a candidate is relevant to the query.

The adaptive fusion orders a query's candidates well, but its score only says where a candidate
stands among them: the best one scores near 1 whatever it is. The calibrated score puts that place
together with evidence about the query that means the same for every query and tenant:

- `best_cosine`: the semantic leg's best cosine (MiniLM: about 0.3 is unrelated, 0.6 on topic);
- `keyword_share`: the keyword leg's best BM25 score divided by the most the query's own terms could
  score ((k1 + 1) · Σ idf, every term matched and saturated; a term no memory holds counts with
  df = 0), so a query whose rarest terms (names, numbers) match nothing reaches a small share
  however common its other words are;
- `agreement`: how many of the two legs' first AGREEMENT_DEPTH hits are the same memories, beyond
  what chance gives in a scope of that size.

A logistic model maps them to a probability. Its coefficients were fitted offline on labelled
candidates pooled from the shared evaluation sets plus negatives built from them, validated leave
one set out (docs/benchmarks.md, "Calibrated score"); they are constants so the score is the same
on every machine. The query's evidence is the same for all its candidates, so the calibrated order
is the adaptive order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# The fusion whose score is calibrated (the default one); rrf and weighted keep R-S4's definitions.
CALIBRATED_FUSION = "adaptive"
# BM25's k1 as the keyword leg uses it: a term's part saturates at idf · (k1 + 1).
BM25_K1 = 1.2
AGREEMENT_DEPTH = 10
# Intercept, then the coefficients of the adaptive score, best cosine, keyword share and agreement.
COEFFICIENTS = (-6.379, 1.709, 2.792, 2.555, 0.976)
# Once a query is answered, a result at least this share as likely relevant as the best one is shown
# even below the default floor (docs/benchmarks.md, "The floor once a query is answered").
ANSWERED_SHARE = 0.5


def default_floor(floor: float, best: float) -> float:
    """The default floor for each result of a query whose best result scores `best`.

    The floor decides whether a query is answered at all (its best result reaches it); the results
    after the best are then cut relative to it, so that one just below the floor is not dropped
    while a slightly better one is shown: the floor is a question about the query, and a result
    half as likely relevant as an answer shown is still worth its place in the list.
    """
    return min(floor, ANSWERED_SHARE * best) if best >= floor else floor


def keyword_ceiling(idfs: Sequence[float]) -> float:
    """The most BM25 could give a memory for a query whose lexemes have these idfs."""
    return (BM25_K1 + 1.0) * sum(idfs)


def _agreement(semantic_ids: Sequence[object], keyword_ids: Sequence[object], pool: float) -> float:
    """How much more the legs' first AGREEMENT_DEPTH hits overlap than chance would make them, 0–1.

    Chance-corrected (as Cohen's kappa is): in a scope of ten memories two lists of ten share all
    ten whatever the query, which says nothing; in a large one sharing a few is already evidence.
    """
    semantic = set(semantic_ids[:AGREEMENT_DEPTH])
    keyword = set(keyword_ids[:AGREEMENT_DEPTH])
    most = min(len(semantic), len(keyword))
    if most == 0:
        return 0.0  # a leg found nothing (an empty scope): nothing to agree on
    chance = len(semantic) * len(keyword) / pool
    return max(0.0, (len(semantic & keyword) - chance) / (most - chance)) if most > chance else 0.0


@dataclass(frozen=True, slots=True)
class QueryEvidence:
    """What the legs say about the query as a whole, on scales shared by every query."""

    best_cosine: float
    keyword_share: float
    agreement: float

    @classmethod
    def of(
        cls,
        *,
        cosines: Sequence[float],
        bm25: Sequence[float],
        ceiling: float,
        semantic_ids: Sequence[object] = (),
        keyword_ids: Sequence[object] = (),
        depth: int,
    ) -> QueryEvidence:
        """From the legs' scores, best first (cosines; BM25 scores, empty when BM25 matched nothing).

        `depth` is how many hits each leg was asked for: a semantic leg that returned fewer saw
        every memory in scope, which is what chance agreement is measured against.
        """
        share = min(bm25[0] / ceiling, 1.0) if bm25 and ceiling > 0 else 0.0
        pool = len(semantic_ids) if len(semantic_ids) < depth else math.inf
        return cls(cosines[0] if cosines else 0.0, share, _agreement(semantic_ids, keyword_ids, pool))

    def shown(self) -> dict[str, float]:
        """The evidence as score_breakdown shows it."""
        return {
            "best_cosine": round(self.best_cosine, 6),
            "keyword_share": round(self.keyword_share, 6),
            "agreement": round(self.agreement, 6),
        }


def features(adaptive: float, query: QueryEvidence) -> tuple[float, ...]:
    """What the model weighs, in COEFFICIENTS' order after the intercept."""
    return (adaptive, query.best_cosine, query.keyword_share, query.agreement)


def probability_of(values: Sequence[float], coefficients: Sequence[float]) -> float:
    """The logistic model: intercept plus coefficients times features, squashed to (0, 1)."""
    z = coefficients[0] + sum(c * v for c, v in zip(coefficients[1:], values, strict=True))
    return 1.0 / (1.0 + math.exp(-z))


def logistic_line(query: QueryEvidence) -> tuple[float, float]:
    """The logistic's argument for this query as (intercept plus the query's evidence, the adaptive score's coefficient)."""
    rest = features(0.0, query)[1:]
    return COEFFICIENTS[0] + sum(c * v for c, v in zip(COEFFICIENTS[2:], rest, strict=True)), COEFFICIENTS[1]


def on_line(line: tuple[float, float], adaptive: float) -> float:
    """The calibrated probability of an adaptive score, on a query's logistic_line."""
    constant, slope = line
    return 1.0 / (1.0 + math.exp(-(constant + slope * adaptive)))


def probability(adaptive: float, query: QueryEvidence) -> float:
    """The calibrated probability that a candidate with this adaptive score is relevant."""
    return on_line(logistic_line(query), adaptive)
