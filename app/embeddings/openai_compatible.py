"""An OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, Ollama, TEI, vLLM…) as an encode function.

Requests carry at most `batch_size` texts; a 429, a 5xx, a timeout or a refused connection is
retried with exponential backoff (honouring Retry-After) up to `max_retries` times, after which
EmbeddingUnavailable says the provider is down: searches then rank by keyword alone and writes
answer 503, storing nothing. The API key is sent, never logged or shown in an error.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx
import numpy as np
import numpy.typing as npt

from app.embeddings.base import EmbeddingUnavailable

log = logging.getLogger("recalld.embeddings")

# Backoff before retry n (0-based): BASE · 2^n seconds, with ±25 % jitter so clients that failed
# together do not retry together; a Retry-After the server sends wins, up to MAX_BACKOFF_SECONDS.
BASE_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 30.0
_RETRIED_STATUSES = frozenset({408, 409, 429}) | frozenset(range(500, 600))


class EmbeddingResponseError(EmbeddingUnavailable):
    """The endpoint answered, but not with what this configuration expects (wrong model, dimension)."""


@dataclass(frozen=True, slots=True)
class EndpointConfig:
    """Where and how to call the endpoint."""

    base_url: str
    model: str
    dim: int | None
    api_key: str | None
    timeout_seconds: float
    max_retries: int
    batch_size: int
    # Send `dimensions: dim` (models that can shorten their vectors, e.g. text-embedding-3-*).
    send_dimensions: bool


def _retry_after(response: httpx.Response | None) -> float | None:
    if response is None:
        return None
    value = response.headers.get("retry-after")
    try:
        return min(float(value), MAX_BACKOFF_SECONDS) if value is not None else None
    except ValueError:
        return None  # an HTTP date: rare for APIs; the exponential backoff applies


class OpenAICompatibleEncoder:
    """Blocking encode function of an OpenAI-compatible endpoint: L2-normalised rows, in input order."""

    def __init__(self, config: EndpointConfig, *, transport: httpx.BaseTransport | None = None) -> None:
        self.config = config
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self._client = httpx.Client(
            base_url=config.base_url.rstrip("/"),
            timeout=config.timeout_seconds,
            headers=headers,
            transport=transport,
        )
        self._has_v1 = httpx.URL(config.base_url).path.rstrip("/").endswith("/v1")
        self._path = "/embeddings"

    def __call__(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed texts, `batch_size` per request."""
        if not texts:
            return np.empty((0, self.config.dim or 0), dtype=np.float32)
        parts = [
            self._request(list(texts[start : start + self.config.batch_size]))
            for start in range(0, len(texts), self.config.batch_size)
        ]
        return np.concatenate(parts)

    def probe_dim(self) -> int:
        """The dimension the endpoint's vectors have (one one-word request)."""
        return int(self._request(["dimension probe"]).shape[1])

    def _request(self, texts: list[str]) -> npt.NDArray[np.float32]:
        body: dict[str, object] = {"model": self.config.model, "input": texts}
        if self.config.send_dimensions and self.config.dim is not None:
            body["dimensions"] = self.config.dim
        for attempt in range(self.config.max_retries + 1):
            response: httpx.Response | None = None
            try:
                response = self._client.post(self._path, json=body)
                if response.status_code == 404 and self._path == "/embeddings" and not self._has_v1:
                    # A base URL given without its /v1 (http://host:11434): the API lives one level down.
                    self._path = "/v1/embeddings"
                    response = self._client.post(self._path, json=body)
                if response.status_code not in _RETRIED_STATUSES:
                    break
                failure = f"HTTP {response.status_code}"
            except httpx.TransportError as exc:  # timeouts, refused or reset connections
                failure = type(exc).__name__
            if attempt == self.config.max_retries:
                raise EmbeddingUnavailable(
                    f"embedding endpoint {self.config.base_url} failed {attempt + 1} times (last: {failure})"
                )
            delay = _retry_after(response) or BASE_BACKOFF_SECONDS * 2**attempt * random.uniform(0.75, 1.25)
            log.warning("embedding request failed (%s); retrying in %.1f s", failure, delay)
            time.sleep(delay)
        assert response is not None
        if response.status_code != 200:
            # 4xx other than the retried ones: the request itself is wrong (model name, key).
            raise EmbeddingResponseError(
                f"embedding endpoint {self.config.base_url} answered HTTP {response.status_code}: "
                f"{response.text[:200]}"
            )
        return self._matrix(response, len(texts))

    def _matrix(self, response: httpx.Response, count: int) -> npt.NDArray[np.float32]:
        try:
            data = response.json()["data"]
            # OpenAI numbers the rows; servers that leave `index` out answer in input order.
            ordered = sorted(enumerate(data), key=lambda pair: pair[1].get("index", pair[0]))
            matrix = np.asarray([item["embedding"] for _, item in ordered], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingResponseError(
                f"embedding endpoint {self.config.base_url} answered without an OpenAI `data` list"
            ) from exc
        if matrix.ndim != 2 or matrix.shape[0] != count:
            raise EmbeddingResponseError(
                f"embedding endpoint {self.config.base_url} returned {matrix.shape[0]} vectors for {count} texts"
            )
        if self.config.dim is not None and matrix.shape[1] != self.config.dim:
            raise EmbeddingResponseError(
                f"embedding endpoint returned {matrix.shape[1]} dimensions, RECALLD_EMBEDDING_DIM is "
                f"{self.config.dim}"
            )
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return np.asarray(matrix / np.maximum(norms, 1e-12), dtype=np.float32)

    def close(self) -> None:
        """Close the HTTP connections."""
        self._client.close()
