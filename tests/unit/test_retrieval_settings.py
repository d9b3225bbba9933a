"""Request › scope › service default, resolved in one place; the fusion registry and its names."""

from __future__ import annotations

from typing import get_args

import pytest

from app.api.schemas.retrieval import SearchIn
from app.infra.config import RerankProviderName, Settings
from app.rerank.factory import RERANKERS, build_reranker
from app.retrieval.fusion import FUSION_NAMES, FUSIONS
from app.services.requests import FusionWeights, RecallWeightOverrides
from app.services.retrieval_context import Asked, resolve_settings
from app.services.scopes import FusionWeightSettings, ScopeSettings, ScoreWeights

pytestmark = pytest.mark.unit

DEFAULTS = Settings(default_fusion="adaptive", rrf_k=60, min_score=0.1, decay_half_life_days=30.0)


def test_every_fusion_name_has_one_registry_entry_and_the_api_accepts_exactly_those() -> None:
    assert tuple(FUSIONS) == FUSION_NAMES
    assert tuple(SearchIn.model_json_schema()["properties"]["fusion"]["enum"]) == FUSION_NAMES


def test_service_defaults_apply_when_neither_request_nor_scope_sets_anything() -> None:
    s = resolve_settings(DEFAULTS, ScopeSettings(), Asked())
    assert (s.fusion, s.weights, s.k) == ("adaptive", {"semantic": 1.0, "keyword": 1.0}, 60)
    assert (s.half_life_days, s.min_score, s.rerank, s.rerank_top_n, s.diversity) == (
        30.0,
        0.1,
        False,
        50,
        0.0,
    )


def test_the_scope_overrides_defaults_and_the_request_overrides_the_scope() -> None:
    scope = ScopeSettings(
        fusion="rrf",
        fusion_weights=FusionWeightSettings(semantic=2.0, k=10),
        half_life_days=5,
        rerank=True,
        rerank_top_n=7,
        score_weights=ScoreWeights(relevance=0.9),
    )
    s = resolve_settings(DEFAULTS, scope, Asked())
    assert (s.fusion, s.weights, s.k) == ("rrf", {"semantic": 2.0, "keyword": 1.0}, 10)
    assert (s.half_life_days, s.rerank, s.rerank_top_n, s.recall_weights.relevance) == (5, True, 7, 0.9)
    asked = Asked(
        fusion="adaptive",
        weights=FusionWeights(semantic=0.0, k=3),
        half_life_days=1.0,
        rerank=False,
        rerank_top_n=2,
        score_weights=RecallWeightOverrides(relevance=0.1),
    )
    s = resolve_settings(DEFAULTS, scope, asked)
    assert (s.fusion, s.weights, s.k) == ("adaptive", {"semantic": 0.0, "keyword": 1.0}, 3)
    assert (s.half_life_days, s.rerank, s.rerank_top_n, s.recall_weights.relevance) == (1.0, False, 2, 0.1)


def test_weighted_fusion_and_code_search_bring_their_own_default_weights() -> None:
    assert resolve_settings(DEFAULTS, ScopeSettings(), Asked(fusion="weighted")).weights == {
        "semantic": 0.7,
        "keyword": 0.3,
    }
    code = resolve_settings(DEFAULTS, ScopeSettings(), Asked(code=True))
    assert (code.fusion, code.weights) == ("rrf", {"semantic": 0.7, "keyword": 0.3})


def test_every_reranker_name_the_settings_accept_has_a_builder() -> None:
    assert get_args(RerankProviderName) == ("none", *RERANKERS)
    assert build_reranker(Settings(rerank_provider="none")) is None
