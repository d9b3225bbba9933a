"""The query's embedding, computed in the background while the keyword leg runs."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from app.embeddings.base import Vector
from app.metrics import EMBEDDING_LATENCY
from app.services.timings import Timings
from app.state import ServiceState

log = logging.getLogger("recalld.search")


async def _embed_query(state: ServiceState, text: str, tenant_id: str, timings: Timings) -> Vector | None:
    if state.embedder is None:
        return None
    started = time.perf_counter()
    try:
        vector = await state.embedder.embed_query(text, tenant_id=tenant_id)
    except Exception as exc:
        # SPEC R-S1: a failing provider (endpoint down, timeout, model error) costs the semantic
        # leg, not the request: the search answers from the keyword leg, embedding_used false.
        log.warning("query embedding failed (%s); answering from the keyword leg", type(exc).__name__)
        return None
    EMBEDDING_LATENCY.labels("query").observe(time.perf_counter() - started)
    timings.add("embed", started)
    return vector


@asynccontextmanager
async def query_embedding(
    state: ServiceState, text: str, timings: Timings, *, tenant_id: str, wanted: bool
) -> AsyncIterator[asyncio.Task[Vector | None] | None]:
    """The query's embedding as a background task for the block; abandoned on the way out."""
    # The model's thread runs while PostgreSQL does the keyword leg; a task nobody awaited (an
    # error, a keyword-only plan) is cancelled or its exception retrieved, never left dangling.
    task = asyncio.create_task(_embed_query(state, text, tenant_id, timings)) if wanted else None
    try:
        yield task
    finally:
        if task is not None:
            if not task.done():
                task.cancel()
            elif not task.cancelled():
                task.exception()  # retrieved: the request's own outcome is what gets reported


async def embedding_used(task: asyncio.Task[Vector | None] | None) -> bool:
    """Whether the request got a query embedding (false without an embedder)."""
    return task is not None and await task is not None
