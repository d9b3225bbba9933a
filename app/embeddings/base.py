"""The embedder interface, and the query path's batching and cache."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from app.metrics import EMBEDDING_LATENCY

log = logging.getLogger("recalld.embeddings")

Vector = npt.NDArray[np.float32]
EncodeFn = Callable[[Sequence[str]], npt.NDArray[np.float32]]
# Writes that may hold their transaction (a pooled connection) open while their later batches are
# embedded; more concurrent bulk writes would leave searches waiting for connections.
OVERLAPPING_WRITES = 2


# How far the query worker's nice value sits above the event loop's. The loop serves every request
# in flight, so each moment it waits for a core behind the worker delays all of them, while a later
# batch delays only its own queries. +5 raised S2 throughput at concurrency 8 (docs); raising a
# thread's nice needs no privilege.
QUERY_WORKER_NICE = 5


def _yield_to_event_loop() -> None:
    """Lower the calling worker thread's CPU priority by QUERY_WORKER_NICE (Linux: per thread)."""
    # A new thread starts at its creator's nice value, the loop's. Elsewhere the call is missing or
    # refused, and the worker simply keeps the loop's priority.
    with suppress(AttributeError, OSError):
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, os.getpriority(os.PRIO_PROCESS, thread) + QUERY_WORKER_NICE)


@dataclass(frozen=True, slots=True)
class DocumentBatch:
    """One embedding batch of a bulk write: positions in the texts given, and their vectors when done."""

    positions: list[int]
    vectors: asyncio.Future[list[Vector]]


class EmbeddingUnavailable(RuntimeError):
    """The embedding provider cannot embed right now (down, overloaded, answering wrongly); nothing was stored."""


@dataclass(frozen=True, slots=True)
class EmbedderIdentity:
    """What is recorded in the database: vectors of different identities never mix."""

    provider: str
    model: str
    dim: int


@dataclass(frozen=True, slots=True)
class SwitchVector:
    """A write's vector from the new model of the switch `switch_id`; stored only while that switch runs.

    An abort followed at once by another switch can leave the first switch's model lent to writes
    for a moment: its vectors must not land in the second switch's column (repositories.memories).
    """

    switch_id: str
    vector: Vector


@dataclass(frozen=True, slots=True)
class _Lent:
    """The new model a running switch lends to writes, and that switch's id."""

    switch_id: str
    target: Embedder


class Embedder:
    """Runs a blocking encode function off the event loop.

    Queries and documents have a worker thread each: a query never queues behind a tenant's bulk
    upload (it shares the cores with it meanwhile, which costs far less than waiting for it).
    Queries that arrive while the query worker is busy are embedded together in its next batch
    (cheaper per query than one pass each; each row is bitwise the vector the query gets alone,
    tests/test_query_encoder.py), and recent query vectors are cached per tenant, since agents repeat queries a lot; a cache
    shared across tenants would let one tenant time whether another searched a string.
    """

    def __init__(
        self,
        identity: EmbedderIdentity,
        encode: EncodeFn,
        *,
        document_encode: EncodeFn | None = None,
        runtime: str,
        batch_size: int,
        cache_size: int,
        scripts: frozenset[str] | None = None,
        on_close: Callable[[], None] | None = None,
        background_workers: int = 1,
    ) -> None:
        self.identity = identity
        self._on_close = on_close
        self.runtime = runtime
        # The writing systems (app.retrieval.language names) the model was trained to read;
        # None: any. Text in another script gets noise vectors, so search does not trust them.
        self.scripts = scripts
        self._encode = encode
        # Bulk documents may take a higher-throughput runtime than single queries (app.embeddings.factory).
        self.document_encode = document_encode or encode
        self._batch_size = batch_size
        self._cache: OrderedDict[tuple[str, str], Vector] = OrderedDict()
        self._cache_size = cache_size
        self._query_executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="embedder-query", initializer=_yield_to_event_loop
        )
        self._document_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedder-documents")
        # Bulk work nobody waits on (a model switch re-embedding every memory) has a lane of its own:
        # in the documents' lane each write waited behind a whole background batch. An endpoint
        # over HTTP gets several threads, one per request the switch keeps in flight.
        self._background_executor = ThreadPoolExecutor(
            max_workers=background_workers, thread_name_prefix="embedder-background"
        )
        # Keyed by (tenant id, text): identical queries of two tenants never share a future either.
        self._pending: dict[tuple[str, str], asyncio.Future[Vector]] = {}
        self._worker: asyncio.Task[None] | None = None
        self._document_runs: set[asyncio.Task[None]] = set()
        self._overlapping_writes = 0
        self.document_texts_embedded = 0
        # The new model of a running model switch (services.embedding_switch), and the switch's id:
        # writes embed with both models.
        self._lent: _Lent | None = None

    def start_documents(self, texts: Sequence[str], *, background: bool = False) -> list[DocumentBatch]:
        """Start embedding texts for storage; each batch's vectors arrive as soon as it is done.

        Batches hold texts of similar length (less padding computed and discarded), and a caller can
        write one batch's rows while the next is embedded. The batches run one at a time, so
        another request's batches interleave with these rather than queueing behind all of them.
        Callers must `cancel_documents` the batches when they stop waiting for them. `background`:
        bulk work no request waits on, embedded beside requests' documents instead of before them.
        """
        loop = asyncio.get_running_loop()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        batches = [
            DocumentBatch(order[start : start + self._batch_size], loop.create_future())
            for start in range(0, len(order), self._batch_size)
        ]
        executor = self._background_executor if background else self._document_executor
        run = asyncio.create_task(self._embed_batches(texts, batches, executor))
        self._document_runs.add(run)
        run.add_done_callback(self._document_runs.discard)
        return batches

    async def _embed_batches(
        self, texts: Sequence[str], batches: list[DocumentBatch], executor: ThreadPoolExecutor
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            for batch in batches:
                if batch.vectors.done():  # cancelled: the caller gave up
                    continue
                started = time.perf_counter()
                matrix = await loop.run_in_executor(
                    executor, self.document_encode, [texts[i] for i in batch.positions]
                )
                EMBEDDING_LATENCY.labels("document").observe(time.perf_counter() - started)
                self.document_texts_embedded += len(batch.positions)
                if not batch.vectors.done():
                    batch.vectors.set_result([np.asarray(row, dtype=np.float32) for row in matrix])
        except BaseException as exc:
            failure = exc if isinstance(exc, Exception) else None
            for batch in batches:
                if not batch.vectors.done():
                    if failure is None:
                        batch.vectors.cancel()
                    else:
                        batch.vectors.set_exception(failure)
            if failure is None:
                raise

    @contextmanager
    def overlap_slot(self) -> Iterator[bool]:
        """True when the caller may write batches while later ones embed; else it waits for all first."""
        granted = self._overlapping_writes < OVERLAPPING_WRITES
        self._overlapping_writes += granted
        try:
            yield granted
        finally:
            self._overlapping_writes -= granted

    @staticmethod
    def cancel_documents(batches: Sequence[DocumentBatch]) -> None:
        """Stop the batches not yet embedded; failures nobody will read are marked as seen."""
        for batch in batches:
            if not batch.vectors.done():
                batch.vectors.cancel()
            elif not batch.vectors.cancelled():
                batch.vectors.exception()

    async def embed_documents(self, texts: Sequence[str], *, background: bool = False) -> list[Vector]:
        """Embed texts for storage, in batches; rows in the order given (`background`: see start_documents)."""
        out: list[Vector | None] = [None] * len(texts)
        batches = self.start_documents(texts, background=background)
        try:
            for batch in batches:
                for position, vector in zip(batch.positions, await batch.vectors, strict=True):
                    out[position] = vector
        finally:
            self.cancel_documents(batches)
        return [vector for vector in out if vector is not None]

    @property
    def switch_target(self) -> Embedder | None:
        """The new model lent to writes by a running model switch, or None."""
        return self._lent.target if self._lent is not None else None

    def lend_switch_target(self, switch_id: str, target: Embedder) -> None:
        """Let writes embed with target too, the new model of the switch recorded as switch_id."""
        self._lent = _Lent(switch_id, target)

    def withdraw_switch_target(self, target: Embedder) -> None:
        """Stop lending target to writes, if it is the model lent."""
        if self.switch_target is target:
            self._lent = None

    async def switch_vectors(self, texts: Sequence[str]) -> list[SwitchVector | None]:
        """The running model switch's new-model vectors of texts, for a write to store beside its own.

        All None when no switch runs, or when the new model cannot embed them now: the write goes
        on, and the switch's worker embeds those rows later. All None too when the worker withdrew
        the new model meanwhile (the switch ended, or the worker failed): it closes the model it
        withdraws, which fails or cancels what that model was still embedding.
        """
        lent = self._lent
        if lent is None or not texts:
            return [None] * len(texts)
        try:
            vectors = await lent.target.embed_documents(texts)
        except EmbeddingUnavailable as exc:
            log.warning(
                "the new model of the running switch did not embed a write (%s); the switch will", exc
            )
            return [None] * len(texts)
        except (Exception, asyncio.CancelledError):
            task = asyncio.current_task()
            if self._lent is lent or (task is not None and task.cancelling()):
                raise  # the model still lent, or the request itself cancelled: not a withdrawal
            return [None] * len(texts)
        return [SwitchVector(lent.switch_id, vector) for vector in vectors]

    async def embed_query(self, text: str, *, tenant_id: str) -> Vector:
        """Embed one query; cached per tenant, and batched with concurrent queries."""
        key = (tenant_id, text)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        future = self._pending.get(key)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._pending[key] = future
            if self._worker is None or self._worker.done():
                self._worker = asyncio.create_task(self._drain())
        return await asyncio.shield(future)

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            batch = dict(list(self._pending.items())[: self._batch_size])
            keys = list(batch)
            texts = [text for _, text in keys]
            try:
                matrix = await loop.run_in_executor(self._query_executor, self._encode, texts)
            except Exception as exc:
                for key, future in batch.items():
                    self._pending.pop(key, None)
                    if not future.done():
                        future.set_exception(exc)
                continue
            for key, row in zip(keys, matrix, strict=True):
                vector = np.asarray(row, dtype=np.float32)
                self._remember(key, vector)
                future = self._pending.pop(key)
                if not future.done():
                    future.set_result(vector)

    def _remember(self, key: tuple[str, str], vector: Vector) -> None:
        self._cache[key] = vector
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def close(self) -> None:
        """Stop the worker threads."""
        self._query_executor.shutdown(wait=False, cancel_futures=True)
        self._document_executor.shutdown(wait=False, cancel_futures=True)
        self._background_executor.shutdown(wait=False, cancel_futures=True)
        if self._on_close is not None:
            self._on_close()
