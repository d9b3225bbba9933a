"""An HTTP /rerank endpoint: Cohere-style (Cohere, Jina, vLLM) or Hugging Face TEI bodies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import httpx

from app.rerank.base import RerankError

HttpFormat = Literal["cohere", "tei"]


def request_body(fmt: HttpFormat, model: str | None, query: str, texts: Sequence[str]) -> dict[str, Any]:
    """The JSON body for one rerank call in the endpoint's format."""
    if fmt == "tei":
        return {"query": query, "texts": list(texts), "truncate": True}
    body: dict[str, Any] = {"query": query, "documents": list(texts), "top_n": len(texts)}
    if model:
        body["model"] = model
    return body


def parse_scores(payload: Any, count: int) -> list[float]:
    """Scores in text order from either answer shape.

    TEI answers `[{index, score}]`; Cohere, Jina and vLLM answer `{results: [{index,
    relevance_score}]}`. Both may be sorted by score, so `index` puts each back in place.
    """
    items = payload.get("results") if isinstance(payload, dict) else payload
    if not isinstance(items, list):
        raise RerankError("expected a list of results")
    scores: list[float | None] = [None] * count
    for item in items:
        if not isinstance(item, dict):
            raise RerankError("a result is not an object")
        index = item.get("index")
        value = item.get("relevance_score", item.get("score"))
        if not isinstance(index, int) or not 0 <= index < count:
            raise RerankError(f"result index {index!r} is out of range")
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise RerankError(f"result {index} has no numeric score")
        scores[index] = float(value)
    missing = [i for i, s in enumerate(scores) if s is None]
    if missing:
        raise RerankError(f"no score for text {missing[0]}")
    return [s for s in scores if s is not None]


class HttpReranker:
    """Posts (query, texts) to a /rerank URL with a client owned for the service's lifetime."""

    name = "http"

    def __init__(
        self, url: str, *, fmt: HttpFormat, model: str | None, api_key: str | None, timeout: float
    ) -> None:
        self._url = url
        self._fmt: HttpFormat = fmt
        self._model = model
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(headers=headers, timeout=timeout)

    async def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """One score per text; HTTP errors and malformed answers raise."""
        if not texts:
            return []
        response = await self._client.post(self._url, json=request_body(self._fmt, self._model, query, texts))
        response.raise_for_status()
        try:
            payload = response.json()
        except ValueError as exc:
            raise RerankError("the answer is not JSON") from exc
        return parse_scores(payload, len(texts))

    async def close(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()
