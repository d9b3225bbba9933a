"""Pure parts of the post-fusion stages: MMR order, reranker score order, HTTP answer shapes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import numpy.typing as npt
import pytest

from app.rerank.base import RerankError
from app.rerank.http import parse_scores, request_body
from app.retrieval.reorder import Candidate, cosine_matrix, mmr_order, order_by_scores, unit_relevance

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _unit(*xs: float) -> npt.NDArray[np.float32]:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_mmr_keeps_the_best_first_and_skips_a_near_duplicate() -> None:
    candidates = [
        Candidate("a", 0.9, T0),
        Candidate("a-copy", 0.89, T0),
        Candidate("b", 0.6, T0),
    ]
    vectors = [_unit(1, 0, 0), _unit(1, 0.01, 0), _unit(0.3, 1, 0)]
    similarity = cosine_matrix(vectors)
    assert [p.index for p in mmr_order(candidates, similarity, 0.0)] == [0, 1, 2]
    picks = mmr_order(candidates, similarity, 0.5)
    assert [p.index for p in picks] == [0, 2, 1]
    assert picks[0].max_similarity == 0.0
    assert picks[2].max_similarity == pytest.approx(float(similarity[1, 0]))


def test_mmr_ties_fall_to_created_at_desc_then_id() -> None:
    older, newer = T0, T0 + timedelta(days=1)
    candidates = [
        Candidate("top", 1.0, T0),
        Candidate("b", 0.5, older),
        Candidate("c", 0.5, newer),
        Candidate("a", 0.5, older),
    ]
    vectors = [_unit(1, 0), _unit(0, 1), _unit(0, 1), _unit(0, 1)]
    picks = mmr_order(candidates, cosine_matrix(vectors), 0.3)
    # b, c and a score alike at every step: newest first, then by id.
    assert [candidates[p.index].id for p in picks] == ["top", "c", "a", "b"]


def test_unlikeness_earns_nothing_and_a_missing_vector_resembles_nothing() -> None:
    candidates = [Candidate("q", 1.0, T0), Candidate("opposite", 0.4, T0), Candidate("novec", 0.5, T0)]
    similarity = cosine_matrix([_unit(1, 0), _unit(-1, 0), None])
    assert similarity[1, 0] == pytest.approx(-1.0) and similarity[2, 0] == 0.0
    picks = mmr_order(candidates, similarity, 0.5)
    assert [p.index for p in picks] == [0, 2, 1]
    assert picks[2].max_similarity == 0.0  # a negative cosine counts as 0, not as a bonus


def test_order_by_scores_and_unit_relevance() -> None:
    candidates = [Candidate("x", 0.0, T0), Candidate("y", 0.0, T0 + timedelta(1)), Candidate("z", 0.0, T0)]
    assert order_by_scores(candidates, [0.2, 0.2, 0.9]) == [2, 1, 0]
    with pytest.raises(ValueError):
        order_by_scores(candidates, [1.0])
    assert unit_relevance([-3.0, 1.0, 5.0]) == [0.0, 0.5, 1.0]
    assert unit_relevance([0.7, 0.7]) == [1.0, 1.0]


def test_http_rerank_bodies_and_both_answer_shapes() -> None:
    assert request_body("tei", None, "q", ["a", "b"]) == {"query": "q", "texts": ["a", "b"], "truncate": True}
    assert request_body("cohere", "m", "q", ["a"]) == {
        "query": "q",
        "documents": ["a"],
        "top_n": 1,
        "model": "m",
    }
    # Answers come sorted by score; index puts each score back at its text.
    assert parse_scores([{"index": 1, "score": 0.9}, {"index": 0, "score": 0.1}], 2) == [0.1, 0.9]
    cohere = {"results": [{"index": 1, "relevance_score": 0.8}, {"index": 0, "relevance_score": 0.3}]}
    assert parse_scores(cohere, 2) == [0.3, 0.8]
    for bad in (
        {"results": [{"index": 0, "relevance_score": 0.3}]},
        [{"index": 5, "score": 1.0}, {"index": 0, "score": 1.0}],
        [{"index": 0, "score": True}],
        "nope",
    ):
        with pytest.raises(RerankError):
            parse_scores(bad, 2 if not isinstance(bad, list) or len(bad) != 1 else 1)
