"""Confidence decay, recency, temporal decay of dated files, and the recall composite score."""

from __future__ import annotations

import math
import re
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime

SECONDS_PER_DAY = 86400.0
_DATED = re.compile(r"(\d{4})-(\d{2})-(\d{2})\.md$")


def _days_between(earlier: datetime, later: datetime) -> float:
    return max(0.0, (later - earlier).total_seconds() / SECONDS_PER_DAY)


def effective_confidence(
    confidence: float, decay_rate: float, last_confirmed_at: datetime, now: datetime
) -> float:
    """confidence · exp(−decay_rate · days since last confirmation)."""
    return confidence * math.exp(-decay_rate * _days_between(last_confirmed_at, now))


def recency_score(
    last_referenced_at: datetime | None, created_at: datetime, now: datetime, half_life_days: float = 7.0
) -> float:
    """exp(−ln 2 / half_life · days since last reference, or since creation when never referenced)."""
    since = last_referenced_at or created_at
    return math.exp(-math.log(2) / half_life_days * _days_between(since, now))


def temporal_decay(path: str | None, now: datetime, half_life_days: float = 30.0) -> float:
    """Score multiplier of a chunk: exp(−ln 2 / half_life · age) for files named YYYY-MM-DD.md, else 1.

    Age counts whole calendar days (UTC): a daily file is about its day, so today's file is not
    decayed and the file of 30 days ago is weighted exactly one half at the default half-life.
    """
    if not path:
        return 1.0
    match = _DATED.search(path.rsplit("/", 1)[-1])
    if match is None:
        return 1.0
    try:
        dated = date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError:
        return 1.0
    age_days = max(0, (now.astimezone(UTC).date() - dated).days)
    return math.exp(-math.log(2) / half_life_days * age_days)


@dataclass(frozen=True, slots=True)
class RecallWeights:
    """memory_recall composite weights."""

    relevance: float
    importance: float
    recency: float
    confidence: float


# The service defaults (SPEC): what a recall uses when neither the request nor the scope sets a weight.
DEFAULT_RECALL_WEIGHTS = RecallWeights(relevance=0.4, importance=0.3, recency=0.2, confidence=0.1)


def recall_score(
    weights: RecallWeights, *, relevance: float, importance: float, recency: float, confidence: float
) -> float:
    """w_rel·relevance + w_imp·importance/10 + w_rec·recency + w_conf·confidence."""
    return (
        weights.relevance * relevance
        + weights.importance * importance / 10.0
        + weights.recency * recency
        + weights.confidence * confidence
    )


# The one tie order (SPEC): equal scores by created_at DESC, then id ASC. SQL legs end their ORDER
# BY with TIE_BREAK_SQL (memory alias m), so a LIMIT cuts ties the way tie_break_key sorts them
# (a UUID's text order is its byte order, which is PostgreSQL's uuid order).
TIE_BREAK_SQL = "m.created_at DESC, m.id ASC"


def tie_break_key(
    score: float, created_at: datetime, id: uuid.UUID | str
) -> tuple[float, float, uuid.UUID | str]:
    """Sort key: score desc, then created_at desc, then id asc — the same input, the same order.

    Ids are UUIDs (their order is their text's) or, in the pure tests, plain strings.
    """
    return (-score, -created_at.timestamp(), id)
