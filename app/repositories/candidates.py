"""SQL for what the post-fusion stages read of the top-N candidates: their text and stored vector."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
import numpy as np

from app.embeddings.base import Vector


@dataclass(frozen=True, slots=True)
class CandidateText:
    """A candidate's text (for a reranker) and stored embedding (for MMR), when asked for."""

    content: str | None
    embedding: Vector | None


async def candidate_texts(
    conn: asyncpg.Connection,
    *,
    tenant_ids: Sequence[str],
    ids: Sequence[uuid.UUID],
    content: bool,
    embedding: bool,
) -> dict[uuid.UUID, CandidateText]:
    """Content and/or embedding of these memories only (the top-N, never the whole leg)."""
    if not ids:
        return {}
    rows = await conn.fetch(
        f"SELECT id, {'content' if content else 'NULL::text'} AS content, "
        f"{'embedding' if embedding else 'NULL::vector'} AS embedding "
        "FROM memory WHERE tenant_id = ANY($1::uuid[]) AND id = ANY($2::uuid[])",
        [uuid.UUID(t) for t in tenant_ids],
        list(ids),
    )
    return {
        r["id"]: CandidateText(
            r["content"],
            None if r["embedding"] is None else np.asarray(r["embedding"].to_numpy(), dtype=np.float32),
        )
        for r in rows
    }
