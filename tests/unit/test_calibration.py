"""The calibrated score's query evidence: scales that mean the same in a scope of ten or of thousands."""

from __future__ import annotations

import pytest

from app.retrieval.calibration import (
    COEFFICIENTS,
    QueryEvidence,
    default_floor,
    features,
    logistic_line,
    on_line,
    probability,
    probability_of,
)

pytestmark = pytest.mark.unit


def _evidence(semantic: list[int], keyword: list[int]) -> QueryEvidence:
    return QueryEvidence.of(
        cosines=[0.6] * len(semantic),
        bm25=[3.0] * len(keyword),
        ceiling=10.0,
        semantic_ids=semantic,
        keyword_ids=keyword,
        depth=100,
    )


def test_two_legs_listing_a_whole_small_scope_do_not_agree_by_that() -> None:
    # Ten memories, a common word in every one: both legs return all ten, which says nothing.
    assert _evidence(list(range(10)), list(range(10))[::-1]).agreement == 0.0
    # In a large scope (the semantic leg filled its depth) the same overlap is strong evidence.
    assert _evidence(list(range(100)), list(range(10))[::-1]).agreement == 1.0
    assert _evidence(list(range(100)), [0, 1, 2, 3, 4, 50, 51, 52, 53, 54]).agreement == 0.5
    # One keyword hit, found by the semantic leg in a scope of ten: chance, not agreement.
    assert _evidence(list(range(10)), [3]).agreement == 0.0
    # An empty scope: neither leg found anything.
    assert _evidence([], []).agreement == 0.0


def test_the_calibrated_score_rises_with_the_adaptive_score_and_the_evidence() -> None:
    weak = _evidence(list(range(100)), [50])
    strong = _evidence(list(range(100)), list(range(10)))
    assert probability(0.2, weak) < probability(0.9, weak) < probability(0.9, strong)
    assert 0.0 < probability(0.0, weak) < probability(1.0, strong) < 1.0


def test_once_a_query_is_answered_results_are_cut_relative_to_the_best() -> None:
    # Nothing reaches the floor: the query abstains, whatever the results below it score.
    assert default_floor(0.04, 0.039) == 0.04
    # Answered near the floor: a result half as likely relevant as the best is shown too, so one
    # just under the floor is not dropped while a slightly better one is shown.
    assert default_floor(0.04, 0.05) == pytest.approx(0.025)
    # Answered well above it: the floor itself still cuts (it never rises with the best).
    assert default_floor(0.04, 0.3) == 0.04


def test_a_querys_logistic_line_gives_the_models_probability_for_every_adaptive_score() -> None:
    """Search weighs a query's evidence once per query (logistic_line); the model's answer must not change."""
    for query in (QueryEvidence(0.62, 0.4, 0.3), QueryEvidence(0.1, 0.0, 0.0), QueryEvidence(0.9, 1.0, 1.0)):
        line = logistic_line(query)
        for adaptive in (0.0, 0.013, 0.5, 0.97, 1.0):
            assert on_line(line, adaptive) == pytest.approx(
                probability_of(features(adaptive, query), COEFFICIENTS), rel=1e-12, abs=1e-15
            )
