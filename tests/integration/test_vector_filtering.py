"""A small tenant inside a big table still gets `limit` nearest neighbours (R-S2), through its own index.

Synthetic unit vectors stand in for embeddings here: the test is about filtering, not semantics.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import asyncpg
import numpy as np
import pytest

from app.infra.db import tenant_transaction
from app.repositories import search as search_repo
from app.repositories import tenants as tenant_repo
from app.repositories import vector_indexes as vector_index_repo
from app.repositories.search import CandidateFilter
from app.services.vector_indexes import sweep_lock

ROWS = 10_000
TENANTS = 50
SMALL_TENANT_ROWS = 200  # 2 % of the table, as in the 2,000 of 100,000
LIMIT = 10


@pytest.fixture(scope="module")
async def crowded_table(dsn: str) -> tuple[str, np.ndarray]:
    """50 tenants sharing ROWS rows; returns the small tenant's id and a query vector."""
    from app.infra.db import connect

    conn = await connect(dsn)
    try:
        rng = np.random.default_rng(42)
        vectors = rng.normal(size=(ROWS, 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        tenant_ids = [
            (await tenant_repo.create_tenant(conn, name=f"crowd-{uuid.uuid4().hex[:8]}")).id
            for _ in range(TENANTS)
        ]
        small = tenant_ids[0]
        owners = [small] * SMALL_TENANT_ROWS + [
            tenant_ids[1 + i % (TENANTS - 1)] for i in range(ROWS - SMALL_TENANT_ROWS)
        ]
        now = datetime.now(UTC)
        records = [
            (
                uuid.UUID(owner),
                uuid.uuid4(),
                "fact",
                f"row {i}",
                f"row {i}",
                vectors[i],
                1.0,
                0.0,
                now,
                "active",
            )
            for i, owner in enumerate(owners)
        ]
        await conn.copy_records_to_table(
            "memory",
            records=records,
            columns=[
                "tenant_id",
                "id",
                "kind",
                "content",
                "search_text",
                "embedding",
                "confidence",
                "decay_rate",
                "last_confirmed_at",
                "validity",
            ],
        )
        await conn.execute("ANALYZE memory")
        query = rng.normal(size=384).astype(np.float32)
        return small, query / np.linalg.norm(query)
    finally:
        await conn.close()


async def test_a_small_tenants_own_hnsw_index_fills_the_limit(
    crowded_table: tuple[str, np.ndarray], admin_conn: asyncpg.Connection
) -> None:
    small, query = crowded_table
    async with tenant_transaction(admin_conn, [small]):
        exact = (
            await search_repo.search_by_exact_vector(
                admin_conn,
                f=CandidateFilter(tenant_ids=[small], kinds=["fact"]),
                query_vector=query,
                limit=LIMIT,
                candidates=None,
            )
        ).rows
    assert len(exact) == LIMIT
    # The tenant's own graph (2 % of the table): its walk never meets the other tenants' rows.
    # Under the sweep's lock: the service's own sweep may be building an index of this table
    # concurrently, and two concurrent builds on one table deadlock.
    async with sweep_lock(admin_conn):
        await vector_index_repo.build_index(admin_conn, tenant_id=small)
    async with tenant_transaction(admin_conn, [small]):
        await admin_conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
        async with search_repo.index_walks(admin_conn):
            approximate = await search_repo.search_by_vector(
                admin_conn,
                f=CandidateFilter(tenant_ids=[small], kinds=["fact"]),
                tenant_id=small,
                query_vector=query,
                limit=LIMIT,
            )
    assert len(approximate) == LIMIT
    overlap = len({r.id for r in approximate} & {r.id for r in exact}) / LIMIT
    assert overlap >= 0.9
    assert [r.score for r in exact] == sorted((r.score for r in exact), reverse=True)
