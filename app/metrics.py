"""Prometheus instruments, shared by the middleware and the search service."""

from __future__ import annotations

import asyncpg
from prometheus_client import Gauge, Histogram

_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0, 2.5)

REQUEST_LATENCY = Histogram(
    "recalld_request_seconds",
    "HTTP request latency by route",
    ["method", "route", "status"],
    buckets=_BUCKETS,
)
SEARCH_LEG_LATENCY = Histogram(
    "recalld_search_leg_seconds", "Time spent in each search leg", ["leg"], buckets=_BUCKETS
)
EMBEDDING_LATENCY = Histogram(
    "recalld_embedding_seconds",
    "Time to embed: kind=query (one search query) or document (one batch of written texts)",
    ["kind"],
    buckets=_BUCKETS,
)
POOL_SIZE = Gauge("recalld_pool_connections", "Connections in the pool", ["state"])


def observe_pool(pool: asyncpg.Pool) -> None:
    """Refresh the pool gauges (called on scrape)."""
    size = pool.get_size()
    idle = pool.get_idle_size()
    POOL_SIZE.labels("total").set(size)
    POOL_SIZE.labels("idle").set(idle)
    POOL_SIZE.labels("in_use").set(size - idle)
