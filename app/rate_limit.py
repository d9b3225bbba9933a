"""Per-key request rate limits: a token bucket per API key, in this process's memory."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """Each key may send `burst` requests at once and `per_second` on average.

    A bucket per key (not per tenant): one runaway agent is slowed without stalling the tenant's
    other keys. State is per process; several recalld processes each allow the full rate.
    """

    def __init__(self, *, per_second: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second = per_second
        self.burst = burst
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def acquire(self, key_id: str) -> float | None:
        """Take one token for key_id; None when allowed, else the seconds until one is free."""
        now = self._clock()
        bucket = self._buckets.get(key_id)
        if bucket is None:
            bucket = self._buckets[key_id] = _Bucket(tokens=float(self.burst), updated=now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.updated) * self.per_second)
        bucket.updated = now
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return None
        return (1 - bucket.tokens) / self.per_second


def retry_after_header(seconds: float) -> str:
    """Retry-After takes whole seconds; round up so a client that waits it out is let in."""
    return str(max(1, math.ceil(seconds)))
