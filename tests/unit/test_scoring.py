"""Decay, recency, the recall composite and the one tie order."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from app.retrieval.scoring import (
    DEFAULT_RECALL_WEIGHTS,
    RecallWeights,
    effective_confidence,
    recall_score,
    recency_score,
    temporal_decay,
    tie_break_key,
)

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 20, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (None, 1.0),
        ("MEMORY.md", 1.0),
        ("memory/2026-11-20.md", 1.0),
        ("memory/2026-10-21.md", 0.5),
        ("memory/2026-09-21.md", 0.25),
        ("memory/2026-13-45.md", 1.0),  # not a date
        ("memory/2027-01-01.md", 1.0),  # the future is not decayed up
    ],
)
def test_dated_files_halve_every_half_life(path: str | None, expected: float) -> None:
    assert temporal_decay(path, NOW, 30.0) == pytest.approx(expected)


def test_confidence_fades_exponentially_since_the_last_confirmation() -> None:
    assert effective_confidence(0.8, 0.1, NOW, NOW) == pytest.approx(0.8)
    assert effective_confidence(0.8, 0.1, NOW - timedelta(days=10), NOW) == pytest.approx(0.8 * math.exp(-1))
    assert effective_confidence(0.8, 0.1, NOW + timedelta(days=3), NOW) == pytest.approx(0.8)


def test_recency_counts_from_the_last_reference_else_from_creation() -> None:
    week_ago = NOW - timedelta(days=7)
    assert recency_score(None, week_ago, NOW, 7.0) == pytest.approx(0.5)
    assert recency_score(NOW, week_ago, NOW, 7.0) == pytest.approx(1.0)


def test_recall_score_is_the_weighted_sum_with_importance_over_ten() -> None:
    w = RecallWeights(relevance=0.4, importance=0.3, recency=0.2, confidence=0.1)
    assert recall_score(w, relevance=1.0, importance=10, recency=1.0, confidence=1.0) == pytest.approx(1.0)
    assert recall_score(w, relevance=0.5, importance=5, recency=0.0, confidence=0.0) == pytest.approx(0.35)
    assert w == DEFAULT_RECALL_WEIGHTS


def test_ties_fall_to_the_newest_then_the_smallest_id() -> None:
    old, new = NOW - timedelta(days=1), NOW
    items = [
        (0.5, old, uuid.UUID(int=2)),
        (0.5, new, uuid.UUID(int=9)),
        (0.5, old, uuid.UUID(int=1)),
        (0.9, old, uuid.UUID(int=5)),
    ]
    ordered = sorted(items, key=lambda t: tie_break_key(*t))
    assert [t[2].int for t in ordered] == [5, 9, 1, 2]


def test_uuid_order_is_the_order_of_their_text() -> None:
    ids = [uuid.uuid4() for _ in range(200)]
    assert sorted(ids) == sorted(ids, key=str)
