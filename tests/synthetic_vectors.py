"""Synthetic fact rows with unit vectors, for tests about vector ranking rather than semantics."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import numpy as np

DIM = 384


def unit_vectors(rng: np.random.Generator, rows: int) -> np.ndarray:
    """rows random unit vectors of the model's dimension."""
    v = rng.normal(size=(rows, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


async def copy_facts(
    conn: asyncpg.Connection, tenant: str, vectors: np.ndarray, tags: list[list[str]]
) -> list[uuid.UUID]:
    """One fact per vector ("row i", tags[i]) straight into memory (owner's connection); their ids."""
    ids = [uuid.uuid4() for _ in range(len(vectors))]
    now = datetime.now(UTC)
    await conn.copy_records_to_table(
        "memory",
        records=[
            (
                uuid.UUID(tenant),
                ids[i],
                "fact",
                f"row {i}",
                f"row {i}",
                vectors[i],
                tags[i],
                1.0,
                0.0,
                now - timedelta(seconds=i),
                "active",
            )
            for i in range(len(vectors))
        ],
        columns=[
            "tenant_id",
            "id",
            "kind",
            "content",
            "search_text",
            "embedding",
            "tags",
            "confidence",
            "decay_rate",
            "last_confirmed_at",
            "validity",
        ],
    )
    return ids


def nearest(
    vectors: np.ndarray, ids: list[uuid.UUID], query: np.ndarray, keep: list[bool], limit: int
) -> list[uuid.UUID]:
    """The kept rows' ids by cosine to query, brute-forced in float64 (ties in row order)."""
    similarity = vectors.astype(np.float64) @ query.astype(np.float64)
    return [ids[i] for i in np.argsort(-similarity, kind="stable") if keep[i]][:limit]


async def analyze(conn: asyncpg.Connection) -> None:
    """Fresh statistics for memory and memory_vector, whatever index build runs beside.

    A service's index sweep may be building a tenant's index on memory_vector (CREATE INDEX
    CONCURRENTLY); it waits for this transaction while ANALYZE waits for its lock, and PostgreSQL
    aborts one of the two. The sweep retries its build; this tries again once the build is done.
    """
    for attempt in range(1, 11):
        try:
            await conn.execute("ANALYZE memory; ANALYZE memory_vector")
            return
        except asyncpg.DeadlockDetectedError:
            if attempt == 10:
                raise
            await asyncio.sleep(0.5)
