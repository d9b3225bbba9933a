"""What the lifespan builds and the routes use: one object on app.state."""

from __future__ import annotations

from dataclasses import dataclass, field

import asyncpg

from app.config import Settings
from app.embeddings.base import Embedder
from app.rerank.base import Reranker


@dataclass(slots=True)
class ServiceState:
    """Pool, embedder, reranker and the facts detected at startup."""

    settings: Settings
    pool: asyncpg.Pool
    embedder: Embedder | None
    schema_revision: str
    reranker: Reranker | None = None
    # Short-lived caches keyed by tenant set: (monotonic time, values...).
    tenant_sizes: dict[str, tuple[float, tuple[int, int]]] = field(default_factory=dict)
