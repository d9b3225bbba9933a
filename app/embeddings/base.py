"""The embedder interface, and the query path's batching and cache."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from app.metrics import EMBEDDING_LATENCY

Vector = npt.NDArray[np.float32]
EncodeFn = Callable[[Sequence[str]], npt.NDArray[np.float32]]


@dataclass(frozen=True, slots=True)
class EmbedderIdentity:
    """What is recorded in the database: vectors of different identities never mix."""

    provider: str
    model: str
    dim: int


class Embedder:
    """Runs a blocking encode function off the event loop.

    One worker thread owns the model (2 cores: a second thread would only contend). Queries that
    arrive while the worker is busy are embedded together in the next batch, and recent query
    vectors are cached, since agents repeat queries a lot.
    """

    def __init__(
        self, identity: EmbedderIdentity, encode: EncodeFn, *, runtime: str, batch_size: int, cache_size: int
    ) -> None:
        self.identity = identity
        self.runtime = runtime
        self._encode = encode
        self._batch_size = batch_size
        self._cache: OrderedDict[str, Vector] = OrderedDict()
        self._cache_size = cache_size
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedder")
        self._pending: dict[str, asyncio.Future[Vector]] = {}
        self._worker: asyncio.Task[None] | None = None
        self.document_texts_embedded = 0

    async def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        """Embed texts for storage, in batches."""
        out: list[Vector] = []
        loop = asyncio.get_running_loop()
        for start in range(0, len(texts), self._batch_size):
            batch = list(texts[start : start + self._batch_size])
            started = time.perf_counter()
            matrix = await loop.run_in_executor(self._executor, self._encode, batch)
            EMBEDDING_LATENCY.labels("document").observe(time.perf_counter() - started)
            out.extend(np.asarray(row, dtype=np.float32) for row in matrix)
        self.document_texts_embedded += len(texts)
        return out

    async def embed_query(self, text: str) -> Vector:
        """Embed one query; cached, and batched with concurrent queries."""
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            return cached
        future = self._pending.get(text)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._pending[text] = future
            if self._worker is None or self._worker.done():
                self._worker = asyncio.create_task(self._drain())
        return await asyncio.shield(future)

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            batch = dict(list(self._pending.items())[: self._batch_size])
            texts = list(batch)
            try:
                matrix = await loop.run_in_executor(self._executor, self._encode, texts)
            except Exception as exc:
                for text, future in batch.items():
                    self._pending.pop(text, None)
                    if not future.done():
                        future.set_exception(exc)
                continue
            for text, row in zip(texts, matrix, strict=True):
                vector = np.asarray(row, dtype=np.float32)
                self._remember(text, vector)
                future = self._pending.pop(text)
                if not future.done():
                    future.set_result(vector)

    def _remember(self, text: str, vector: Vector) -> None:
        self._cache[text] = vector
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def close(self) -> None:
        """Stop the worker thread."""
        self._executor.shutdown(wait=False, cancel_futures=True)
