"""Retrieval metrics as BEIR/pytrec_eval define them, and latency summaries."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence


def ndcg_at_k(ranked: Sequence[str], relevance: Mapping[str, int], k: int = 10) -> float:
    """nDCG@k with graded gains and a log2 discount; 0 when nothing is relevant."""
    dcg = sum(relevance.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranked[:k]))
    ideal = sorted((g for g in relevance.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranked: Sequence[str], relevance: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents found in the top k."""
    relevant = {doc for doc, gain in relevance.items() if gain > 0}
    if not relevant:
        return 0.0
    return len(relevant & set(ranked[:k])) / len(relevant)


def mrr_at_k(ranked: Sequence[str], relevance: Mapping[str, int], k: int = 10) -> float:
    """Reciprocal rank of the first relevant document in the top k."""
    for i, doc in enumerate(ranked[:k]):
        if relevance.get(doc, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), q in [0, 100]."""
    if not values:
        return 0.0
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarise(latencies_ms: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99/mean of latencies in milliseconds."""
    return {
        "p50": percentile(latencies_ms, 50),
        "p95": percentile(latencies_ms, 95),
        "p99": percentile(latencies_ms, 99),
        "mean": sum(latencies_ms) / len(latencies_ms) if latencies_ms else 0.0,
    }


def auroc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """Probability that a random positive scores above a random negative (ties count half)."""
    if not positives or not negatives:
        return 0.0
    ordered = sorted(negatives)
    wins = 0.0
    for p in positives:
        below = bisect.bisect_left(ordered, p)
        equal = bisect.bisect_right(ordered, p) - below
        wins += below + equal / 2
    return wins / (len(positives) * len(negatives))
