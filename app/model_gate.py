"""The embedding model's gate: requests pass it while it is open; a model switch's cut-over closes it.

A request that embeds (a write, a search) holds the model it started with until it answers: its
vectors must go to (or be compared with) columns of that model's dimension. The cut-over closes
the gate, waits for the requests inside to finish, swaps the stored vectors and the service's
embedder, and opens it again; requests that arrived meanwhile wait, then go on with the new model.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class ModelGate:
    """Counts the requests inside; closed, it lets none in until it opens again."""

    def __init__(self) -> None:
        self._inside = 0
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()

    @asynccontextmanager
    async def use(self) -> AsyncIterator[None]:
        """Hold the gate for the block (waits while a cut-over has it closed)."""
        while not self._open.is_set():
            await self._open.wait()
        self._inside += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._inside -= 1
            if not self._inside:
                self._idle.set()

    @asynccontextmanager
    async def closed(self, *, drain_seconds: float) -> AsyncIterator[bool]:
        """Close the gate for the block; yields whether every request inside finished within drain_seconds.

        A request that outlasts the wait (a long upload) keeps running: the block should then give
        up and try again later, the gate open meanwhile.
        """
        self._open.clear()
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), drain_seconds)
            yield self._inside == 0
        finally:
            self._open.set()
