"""What the lifespan builds and the routes use: one object on app.state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import asyncpg

from app.embeddings.base import Embedder
from app.infra.config import Quota, Settings
from app.infra.db import Database
from app.infra.supervisor import EmbeddedSupervisor
from app.model_gate import ModelGate
from app.rate_limit import RateLimiter
from app.rerank.base import Reranker


@dataclass(slots=True)
class ServiceState:
    """Pool, embedder, reranker and the facts detected at startup."""

    settings: Settings
    pool: asyncpg.Pool
    embedder: Embedder | None
    schema_revision: str
    # What services use: pooled connections only around their work, with a bounded wait.
    db: Database
    # /readyz's own connection: it must answer while request traffic holds every pooled one.
    check_pool: asyncpg.Pool
    reranker: Reranker | None = None
    rate_limiter: RateLimiter | None = None
    # Set in embedded mode: whether the embedded PostgreSQL is running (/healthz).
    supervisor: EmbeddedSupervisor | None = None
    # Per tenant id: (monotonic time, whether its own HNSW index was valid then); see ranking.
    vector_indexes: dict[str, tuple[float, bool]] = field(default_factory=dict)
    # Requests that embed hold it; a model switch's cut-over closes it (app.model_gate).
    model_gate: ModelGate = field(default_factory=ModelGate)
    # A running embedding model switch's progress, as /readyz shows it (services.embedding_switch).
    embedding_switch: dict[str, Any] | None = None

    @property
    def quota(self) -> Quota | None:
        """Each tenant's storage quota from the settings; None when switched off."""
        s = self.settings
        if s.tenant_max_memories <= 0 and s.tenant_max_bytes <= 0:
            return None
        unlimited = 2**62
        return Quota(
            max_memories=s.tenant_max_memories if s.tenant_max_memories > 0 else unlimited,
            max_bytes=s.tenant_max_bytes if s.tenant_max_bytes > 0 else unlimited,
        )
