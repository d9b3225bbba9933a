"""Rank fusion on hand-made legs: RRF, weighted and adaptive scores, ranks, and the registry."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from app.retrieval.fusion import (
    FUSIONS,
    KEYWORD_TOO_LITTLE,
    NO_KEYWORD_MATCH,
    NO_SEMANTIC_EVIDENCE,
    adaptive_shares,
    fuse_adaptive,
    fuse_rrf,
    fuse_weighted,
    map_keyword_score,
    unmap_keyword_score,
)
from app.retrieval.hits import Hit, Leg

pytestmark = pytest.mark.unit

T0 = datetime(2026, 1, 1, tzinfo=UTC)
A, B, C = (uuid.UUID(int=i) for i in (1, 2, 3))


def _leg(*items: tuple[uuid.UUID, float]) -> Leg:
    return Leg([Hit(i, s, T0, None) for i, s in items], [s for _, s in items])


def test_rrf_gives_an_item_first_in_both_legs_the_full_score() -> None:
    legs = {"keyword": _leg((A, 0.9), (B, 0.5)), "semantic": _leg((A, 0.8), (C, 0.7))}
    hits = {h.id: h.fused for h in fuse_rrf(legs, {"keyword": 1.0, "semantic": 1.0}, k=60, depth=10)}
    assert hits[A] == pytest.approx(1.0)
    # B: rank 2 in keyword, missing (rank depth + 1) in semantic.
    assert hits[B] == pytest.approx((1 / 62 + 1 / 71) / (2 / 61))
    assert hits[B] == pytest.approx(hits[C])


def test_fusion_keeps_first_seen_order_and_one_hit_per_id() -> None:
    legs = {"keyword": _leg((B, 0.9), (A, 0.5)), "semantic": _leg((A, 0.8), (C, 0.7))}
    assert [h.id for h in fuse_rrf(legs, {"keyword": 1.0, "semantic": 1.0}, depth=10)] == [B, A, C]


def test_equal_leg_scores_share_a_competition_rank() -> None:
    leg = _leg((A, 0.5), (B, 0.5), (C, 0.4))
    assert {i: p[0] for i, p in leg.positions.items()} == {A: 1, B: 1, C: 3}


def test_ranks_and_raw_scores_come_from_the_legs_a_hit_was_fused_from() -> None:
    legs = {"keyword": _leg((A, 0.9)), "semantic": _leg((B, 0.8), (A, 0.3))}
    hit = next(h for h in fuse_rrf(legs, {"keyword": 1.0, "semantic": 1.0}, depth=10) if h.id == A)
    assert hit.ranks == {"keyword": 1, "semantic": 2}
    assert hit.raw_scores == {"keyword": 0.9, "semantic": 0.3}
    assert hit.legs_found == ["keyword", "semantic"]


def test_weighted_fusion_is_the_weighted_mean_with_missing_scores_zero() -> None:
    legs = {"semantic": _leg((A, 0.8), (B, 0.4)), "keyword": _leg((A, 0.5))}
    hits = {h.id: h.fused for h in fuse_weighted(legs, {"semantic": 0.7, "keyword": 0.3})}
    assert hits[A] == pytest.approx(0.7 * 0.8 + 0.3 * 0.5)
    assert hits[B] == pytest.approx(0.7 * 0.4)


def test_weighted_fusion_clamps_scores_into_zero_one() -> None:
    legs = {"semantic": _leg((A, 1.5), (B, -0.2))}
    assert [h.fused for h in fuse_weighted(legs, {"semantic": 1.0})] == [1.0, 0.0]


@pytest.mark.parametrize("raw", [0.0, 0.5, 1.0, 7.25, 100.0])
def test_keyword_score_mapping_round_trips(raw: float) -> None:
    mapped = map_keyword_score(raw)
    assert 0.0 <= mapped < 1.0
    assert unmap_keyword_score(mapped) == pytest.approx(raw)


def test_a_negative_keyword_score_maps_to_zero() -> None:
    assert map_keyword_score(-3.0) == 0.0


EQUAL = {"semantic": 1.0, "keyword": 1.0}


def test_adaptive_shares_sum_to_one_and_favour_the_confident_leg() -> None:
    sure_semantic = adaptive_shares([0.95, 0.5], [1.0, 1.0, 1.0], EQUAL).weights
    assert sum(sure_semantic.values()) == pytest.approx(1.0)
    assert sure_semantic["semantic"] == pytest.approx(0.8)
    sure_keyword = adaptive_shares([0.4], [50.0] + [1.0] * 99, EQUAL).weights
    # The least confidence gives (0.2), less again for a best cosine below what on-topic text reaches.
    assert 0.0 < sure_keyword["semantic"] < 0.2


def test_a_keyword_leg_that_reached_little_of_its_ceiling_weighs_little() -> None:
    keyword = [5.0] + [1.0] * 99
    unknown = adaptive_shares([0.7], keyword, EQUAL).weights
    # 5.0 of a ceiling of 10 is full evidence; of 500 (the query's rare terms matched nothing),
    # a hundredth: the keyword share shrinks with it.
    full = adaptive_shares([0.7], keyword, EQUAL, keyword_ceiling=10.0).weights
    little = adaptive_shares([0.7], keyword, EQUAL, keyword_ceiling=500.0).weights
    assert full == pytest.approx(unknown)
    assert little["keyword"] < full["keyword"] / 2
    assert sum(little.values()) == pytest.approx(1.0)
    nothing_rare = adaptive_shares([0.7], keyword, EQUAL, keyword_ceiling=5000.0)
    assert nothing_rare.weights == {"semantic": 1.0, "keyword": 0.0}
    assert nothing_rare.silenced == {"keyword": KEYWORD_TOO_LITTLE}


def test_a_semantic_leg_nearer_nothing_than_unrelated_text_weighs_little_or_nothing() -> None:
    keyword = [5.0] + [1.0] * 99
    near = adaptive_shares([0.8], keyword, EQUAL).weights
    far = adaptive_shares([0.35], keyword, EQUAL).weights
    assert far["semantic"] < near["semantic"] / 2
    unrelated = adaptive_shares([0.15], keyword, EQUAL)
    assert unrelated.weights == {"semantic": 0.0, "keyword": 1.0}
    assert unrelated.silenced == {"semantic": NO_SEMANTIC_EVIDENCE}


def test_a_keyword_leg_that_matched_nothing_gets_no_weight_and_says_why() -> None:
    shares = adaptive_shares([0.6, 0.5], [], EQUAL)
    assert shares.weights == {"semantic": 1.0, "keyword": 0.0}
    assert shares.silenced == {"keyword": NO_KEYWORD_MATCH}
    hits, fused = fuse_adaptive({"keyword": _leg(), "semantic": _leg((A, 0.6), (B, 0.5))}, EQUAL, depth=10)
    assert fused == shares
    assert [h.id for h in hits] == [A, B]


def test_when_neither_leg_has_evidence_confidence_alone_decides() -> None:
    shares = adaptive_shares([0.1], [], EQUAL)
    assert shares.silenced == {}
    assert sum(shares.weights.values()) == pytest.approx(1.0)


def test_adaptive_with_one_leg_gives_it_the_whole_say() -> None:
    hits, shares = fuse_adaptive({"keyword": _leg((A, 0.75), (B, 0.5))}, {"keyword": 1.0}, depth=10)
    assert shares.weights == {"keyword": 1.0}
    assert [h.fused for h in hits] == pytest.approx(
        [1.0, unmap_keyword_score(0.5) / unmap_keyword_score(0.75)]
    )


@pytest.mark.parametrize("name", sorted(FUSIONS))
def test_every_registered_fusion_returns_each_item_once_with_its_weights(name: str) -> None:
    legs = {"keyword": _leg((A, 0.6), (B, 0.5)), "semantic": _leg((B, 0.9), (C, 0.1))}
    hits, shares = FUSIONS[name].fuse(legs, {"keyword": 1.0, "semantic": 1.0}, 60, 10)
    assert sorted(h.id for h in hits) == [A, B, C]
    assert set(shares.weights) == {"keyword", "semantic"}
    assert all(h.legs is legs for h in hits)


def test_no_legs_fuse_to_nothing() -> None:
    for fusion in FUSIONS.values():
        assert fusion.fuse({}, {}, 60, 10)[0] == []
