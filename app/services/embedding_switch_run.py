"""The switch worker's memory of the switch it runs: where its pass is, its rate, its waits for the provider.

Apart from services.embedding_switch_worker, which keeps the switch's database work and model
lending; this is plain state and timing, no I/O.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from app.embeddings.base import Embedder

log = logging.getLogger("recalld.embedding_switch")

# Waits after the provider failed (on top of its client's own retries): doubling up to the cap.
BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 60.0
# The window the rate (items/s) is measured over.
RATE_WINDOW_SECONDS = 30.0


@dataclass(slots=True)
class SwitchRun:
    """The worker's memory of the switch it runs."""

    record: dict[str, Any]
    target: Embedder
    after: tuple[uuid.UUID, uuid.UUID] | None = None
    done: int = 0
    total: int = 0
    window: deque[tuple[float, int]] = field(default_factory=deque)
    state: str = "running"
    backoff: float = 0.0
    next_request_at: float = 0.0
    reported_at: float = 0.0

    def rate(self) -> float:
        """Items per second over the last RATE_WINDOW_SECONDS."""
        now = time.monotonic()
        while self.window and now - self.window[0][0] > RATE_WINDOW_SECONDS:
            self.window.popleft()
        if len(self.window) < 2:
            return 0.0
        span = now - self.window[0][0]
        return sum(n for _, n in list(self.window)[1:]) / span if span > 0 else 0.0

    def back_off(self, exc: Exception) -> None:
        """After the new model's provider failed: the next try waits twice as long as the last (up to the cap)."""
        self.backoff = min(max(self.backoff * 2, BACKOFF_SECONDS), MAX_BACKOFF_SECONDS)
        self.next_request_at = time.monotonic() + self.backoff
        self.state = f"waiting for the new model's provider ({exc}); next try in {self.backoff:.0f} s"
        log.warning("embedding switch: %s", self.state)

    async def pace(self, per_second: float) -> None:
        """Start one request within per_second requests per second (0: no limit; slots are taken in turn)."""
        if per_second <= 0:
            return
        now = time.monotonic()
        start = max(now, self.next_request_at)
        self.next_request_at = start + 1 / per_second
        if start > now:
            await asyncio.sleep(start - now)
