"""Builds the configured reranker (or none)."""

from __future__ import annotations

from app.config import Settings
from app.rerank.base import Reranker
from app.rerank.cross_encoder import CrossEncoderReranker
from app.rerank.http import HttpReranker


class RerankConfigError(RuntimeError):
    """The reranker settings are incomplete."""


def build_reranker(settings: Settings) -> Reranker | None:
    """The reranker RECALLD_RERANK_PROVIDER names; blocking (a cross-encoder loads its model)."""
    if settings.rerank_provider == "cross-encoder":
        if settings.rerank_model_path is None:
            raise RerankConfigError("RECALLD_RERANK_PROVIDER=cross-encoder needs RECALLD_RERANK_MODEL_PATH")
        return CrossEncoderReranker(settings.rerank_model_path.expanduser())
    if settings.rerank_provider == "http":
        if not settings.rerank_url:
            raise RerankConfigError("RECALLD_RERANK_PROVIDER=http needs RECALLD_RERANK_URL")
        return HttpReranker(
            settings.rerank_url,
            fmt=settings.rerank_http_format,
            model=settings.rerank_model,
            api_key=settings.rerank_api_key,
            timeout=settings.rerank_timeout_seconds,
        )
    return None
