"""Builds the configured reranker (or none)."""

from __future__ import annotations

from collections.abc import Callable

from app.infra.config import Settings
from app.rerank.base import Reranker
from app.rerank.cross_encoder import CrossEncoderReranker
from app.rerank.http import HttpReranker


class RerankConfigError(RuntimeError):
    """The reranker settings are incomplete."""


def _cross_encoder(settings: Settings) -> Reranker:
    if settings.rerank_model_path is None:
        raise RerankConfigError("RECALLD_RERANK_PROVIDER=cross-encoder needs RECALLD_RERANK_MODEL_PATH")
    return CrossEncoderReranker(settings.rerank_model_path.expanduser())


def _http(settings: Settings) -> Reranker:
    if not settings.rerank_url:
        raise RerankConfigError("RECALLD_RERANK_PROVIDER=http needs RECALLD_RERANK_URL")
    return HttpReranker(
        settings.rerank_url,
        fmt=settings.rerank_http_format,
        model=settings.rerank_model,
        api_key=settings.rerank_api_key,
        timeout=settings.rerank_timeout_seconds,
    )


# RECALLD_RERANK_PROVIDER's values (config.RerankProviderName) and how each is built; "none": no reranker.
RERANKERS: dict[str, Callable[[Settings], Reranker]] = {"cross-encoder": _cross_encoder, "http": _http}


def build_reranker(settings: Settings) -> Reranker | None:
    """The reranker RECALLD_RERANK_PROVIDER names; blocking (a cross-encoder loads its model)."""
    build = RERANKERS.get(settings.rerank_provider)
    return build(settings) if build is not None else None
