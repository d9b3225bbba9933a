"""The offline calibration fit: dumped legs in, coefficients and held-out tables out."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from app.retrieval.fusion import map_keyword_score
from recalld_tools.evaluation.calibration_fit import family, fit, load, question, report

pytestmark = pytest.mark.unit


def _record(set_name: str, source: str, rng: random.Random, answerable: bool) -> dict[str, object]:
    # An answerable question: its first candidate is relevant and the legs find it with high
    # scores; a negative: low cosines and a keyword leg matching a small part of its terms.
    cosine = rng.uniform(0.55, 0.9) if answerable else rng.uniform(0.05, 0.45)
    bm25 = rng.uniform(6, 10) if answerable else rng.uniform(0.2, 2)
    ids = [f"{set_name}:{i}" for i in range(30)]
    return {
        "set": set_name,
        "source": source,
        "text": "q",
        "scope": None,
        "relevance": {ids[0]: 1} if answerable else {},
        "keyword": [[i, map_keyword_score(bm25 / (1 + n))] for n, i in enumerate(ids)],
        "semantic": [[i, cosine - 0.01 * n] for n, i in enumerate(ids)],
        "idf": [2.0, 2.5],
    }


def _dump(directory: Path) -> None:
    rng = random.Random(3)
    lines = []
    for set_name, other in (("alpha", "beta"), ("beta", "gamma"), ("gamma", "alpha")):
        lines += [_record(set_name, set_name, rng, True) for _ in range(30)]
        lines += [_record(set_name, f"{other} queries in {set_name}", rng, False) for _ in range(30)]
    (directory / "all.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")


def test_a_set_stored_two_ways_is_one_family() -> None:
    assert family("locomo-dev-transcript") == family("locomo-dev") == "locomo-dev"


def test_the_fit_separates_answerable_from_unanswerable_and_holds_each_family_out(tmp_path: Path) -> None:
    _dump(tmp_path)
    questions = load(tmp_path)
    assert len(questions) == 180
    assert questions[30].negative and questions[30].families == {"alpha", "beta"}
    coefficients = fit(questions)
    # Intercept, adaptive score, best cosine, keyword share, agreement: the evidence counts for relevance.
    assert coefficients[2] > 0 and coefficients[3] > 0
    text = report(questions, [0.05, 0.5])
    assert f"COEFFICIENTS = {coefficients}" in text
    held_out = [line for line in text.splitlines() if line.startswith(("| alpha |", "| beta |", "| gamma |"))]
    assert len(held_out) == 3
    assert "AUROC of the top score, fitted on everything: alpha 1.000" in text


def _legs_disagreeing(**extra: object) -> dict[str, object]:
    # The semantic leg ranks a, b, c; the keyword leg the other way round, its best BM25 score (1.0)
    # a twentieth of what the query's terms could score ((k1 + 1) · (5 + 5) = 22).
    return {
        "set": "alpha",
        "source": "alpha",
        "text": "q",
        "scope": None,
        "relevance": {"a": 1},
        "keyword": [[i, map_keyword_score(s)] for i, s in (("c", 1.0), ("b", 0.3), ("a", 0.1))],
        "semantic": [["a", 0.8], ["b", 0.7], ["c", 0.6]],
        "idf": [5.0, 5.0],
        **extra,
    }


def test_the_fit_hands_fusion_a_bm25_legs_ceiling_as_the_service_does() -> None:
    # Its best match reaches under 5% of the ceiling: the keyword leg weighs nothing, the order is the
    # semantic leg's, and the keyword share is what the service computes.
    q = question(_legs_disagreeing(keyword_match="bm25"))
    assert q.ids == ["a", "b", "c"]
    assert q.features[0][2] == pytest.approx(1.0 / 22.0)


def test_the_substring_tier_carries_no_ceiling_and_no_bm25_evidence() -> None:
    # The substring tier answers when BM25 matched nothing: fusion weighs it in full, the
    # calibration sees no keyword share, whether the dump says so or its halved shares show it.
    recorded = question(_legs_disagreeing(keyword_match="fulltext"))
    halved_shares = _legs_disagreeing(keyword=[["c", 0.5], ["b", 0.25], ["a", 1 / 6]])
    for q in (recorded, question(halved_shares)):
        assert q.ids[0] == "c"
        assert q.features[0][2] == 0.0
