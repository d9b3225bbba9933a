"""The reranker interface and what a rerank attempt reports."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import httpx

log = logging.getLogger("recalld.rerank")

# Cross-encoders read a few hundred tokens at most; longer texts only cost transfer and tokenising.
MAX_TEXT_CHARS = 4000


class RerankError(RuntimeError):
    """The reranker answered, but not with one usable score per text."""


class Reranker(Protocol):
    """Scores (query, text) pairs; higher is more relevant."""

    @property
    def name(self) -> str:
        """Provider name reported in responses: cross-encoder or http."""
        ...

    async def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """One score per text, in the texts' order; raises when it cannot."""
        ...

    async def close(self) -> None:
        """Release threads and connections."""
        ...


@dataclass(frozen=True, slots=True)
class RerankOutcome:
    """Scores in text order when the reranker answered in time, else why not."""

    provider: str | None
    scores: list[float] | None
    error: str | None = None


async def rerank(
    reranker: Reranker | None, query: str, texts: Sequence[str], seconds: float
) -> RerankOutcome:
    """Score texts within `seconds`; every failure becomes an outcome without scores, never an exception."""
    if reranker is None:
        return RerankOutcome(None, None, "no reranker configured")
    clipped = [text[:MAX_TEXT_CHARS] for text in texts]
    try:
        scores = await asyncio.wait_for(reranker.score(query, clipped), seconds)
    except TimeoutError:
        log.warning("reranker %s timed out after %.2fs", reranker.name, seconds)
        return RerankOutcome(reranker.name, None, "timeout")
    except Exception as exc:  # a reranker outage must not fail the search
        log.warning("reranker %s failed: %s", reranker.name, exc)
        return RerankOutcome(reranker.name, None, _describe(exc))
    if len(scores) != len(texts):
        return RerankOutcome(reranker.name, None, f"{len(scores)} scores for {len(texts)} texts")
    if not all(math.isfinite(s) for s in scores):
        return RerankOutcome(reranker.name, None, "invalid response: a score is not a finite number")
    return RerankOutcome(reranker.name, scores)


def _describe(exc: Exception) -> str:
    # Said to the client: the kind of failure, never the endpoint's response body.
    if isinstance(exc, httpx.HTTPStatusError):
        return f"http {exc.response.status_code}"
    if isinstance(exc, httpx.TransportError):
        return f"unreachable: {type(exc).__name__}"
    if isinstance(exc, RerankError):
        return f"invalid response: {exc}"
    return type(exc).__name__
