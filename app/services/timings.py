"""Server-side time per phase of a request, for the Server-Timing header and the leg latency metric."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from app.metrics import SEARCH_LEG_LATENCY


@dataclass(slots=True)
class Timings:
    """Server-side time per phase, reported in the Server-Timing header."""

    spans: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, started: float) -> None:
        """Record the time since `started` (perf_counter) under name."""
        elapsed = time.perf_counter() - started
        self.spans[name] = self.spans.get(name, 0.0) + elapsed
        if name in ("semantic", "keyword"):
            SEARCH_LEG_LATENCY.labels(name).observe(elapsed)

    def header(self) -> str:
        """Server-Timing header value."""
        return ", ".join(f"{name};dur={seconds * 1000:.2f}" for name, seconds in self.spans.items())
