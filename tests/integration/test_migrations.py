"""Every migration's downgrade runs, and stored memories survive a downgrade and upgrade again.

Each test works in a database of its own on the session's PostgreSQL, so the service's database
never changes revision.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import numpy as np
import pytest

from app.infra.config import Settings
from app.infra.db import connect
from app.infra.migrate import current_revision, downgrade_to, head_revision, upgrade_to_head
from app.repositories import tenants as tenant_repo
from app.repositories.search import CandidateFilter, search_by_bm25
from app.retrieval.duplicates import content_key
from app.startup import StartupError, prepare_embedding_storage
from tests.synthetic_vectors import unit_vectors

WORDS = [
    "harbor",
    "lantern",
    "quartz",
    "meadow",
    "cobalt",
    "orchard",
    "ember",
    "falcon",
    "tundra",
    "violet",
    "granite",
    "willow",
]
QUERIES = ["harbor lantern", "quartz meadow cobalt", "falcon", "willow granite ember orchard"]
COLUMNS = [
    "tenant_id",
    "id",
    "kind",
    "content",
    "search_text",
    "confidence",
    "decay_rate",
    "last_confirmed_at",
    "validity",
]
FACT = (1.0, 0.0, datetime(2026, 1, 1, tzinfo=UTC), "active")
# The last revision before the keyword postings went into blocks (0013): its downgrade moves them
# back into one row per posting, the heaviest data-moving downgrade there is.
BEFORE_BLOCKS = "0012_rls_tenant_ids_once"


@pytest.fixture
async def scratch_dsn(admin_conn: asyncpg.Connection, dsn: str) -> AsyncIterator[str]:
    """A fresh, empty database on the session's server; dropped afterwards."""
    name = f"migrations_{uuid.uuid4().hex[:10]}"
    await admin_conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(dsn)
    try:
        yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))
    finally:
        await admin_conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


async def _tables(conn: asyncpg.Connection) -> set[str]:
    rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    return {r["tablename"] for r in rows}


async def test_every_downgrade_runs_down_to_an_empty_schema_and_up_again(scratch_dsn: str) -> None:
    await asyncio.to_thread(upgrade_to_head, scratch_dsn)
    await asyncio.to_thread(downgrade_to, scratch_dsn, "base")
    conn = await asyncpg.connect(scratch_dsn)
    try:
        assert await _tables(conn) == {"alembic_version"}
        assert await current_revision(conn) is None
    finally:
        await conn.close()
    await asyncio.to_thread(upgrade_to_head, scratch_dsn)
    conn = await asyncpg.connect(scratch_dsn)
    try:
        assert await current_revision(conn) == head_revision()
    finally:
        await conn.close()


async def _keyword_answers(conn: asyncpg.Connection, tenant: str) -> list[list[tuple[uuid.UUID, float]]]:
    """Each query's exact BM25 top 10 in the tenant (ids and scores)."""
    f = CandidateFilter(tenant_ids=[tenant], kinds=["fact"])
    answers = []
    for query in QUERIES:
        found = await search_by_bm25(
            conn, f=f, query_text=query, limit=10, postings_per_lexeme=None, candidates=50
        )
        answers.append([(r.id, r.score) for r in found.rows])
    return answers


async def test_memories_keep_their_keyword_ranking_through_a_downgrade_and_upgrade(
    scratch_dsn: str,
) -> None:
    """Down to before the block postings (0013-0016 undone) and up again: same rows, same BM25 answers."""
    await asyncio.to_thread(upgrade_to_head, scratch_dsn)
    rng = np.random.default_rng(21)
    rows = 500
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(2, 9)))) for _ in range(rows)]
    conn = await connect(scratch_dsn)
    try:
        tenant = (await tenant_repo.create_tenant(conn, name="migrations")).id
        vectors = unit_vectors(rng, rows)
        await conn.copy_records_to_table(
            "memory",
            records=[
                (uuid.UUID(tenant), uuid.UUID(bytes=rng.bytes(16)), "fact", t, t, *FACT, vectors[i])
                for i, t in enumerate(texts)
            ],
            columns=[*COLUMNS, "embedding"],
        )
        # Most postings into blocks, the rest left as recent postings: both kinds move down. (Ids
        # from the seeded generator: about one row in 128, by its id hash, compacts on insert.)
        await conn.execute("SELECT keyword_compact($1)", uuid.UUID(tenant))
        more = [" ".join(rng.choice(WORDS, size=4)) for _ in range(50)]
        await conn.copy_records_to_table(
            "memory",
            records=[(uuid.UUID(tenant), uuid.UUID(bytes=rng.bytes(16)), "fact", t, t, *FACT) for t in more],
            columns=COLUMNS,
        )
        assert await conn.fetchval("SELECT count(*) FROM keyword_block") > 0
        assert await conn.fetchval("SELECT count(*) FROM keyword_posting") > 0
        before = await _keyword_answers(conn, tenant)
        assert all(before), "every query should find memories"
    finally:
        await conn.close()

    await asyncio.to_thread(downgrade_to, scratch_dsn, BEFORE_BLOCKS)
    await asyncio.to_thread(upgrade_to_head, scratch_dsn)

    conn = await connect(scratch_dsn)
    try:
        assert await conn.fetchval("SELECT count(*) FROM memory") == rows + 50
        assert await conn.fetchval("SELECT count(*) FROM memory_vector") == rows
        after = await _keyword_answers(conn, tenant)
    finally:
        await conn.close()
    assert [[i for i, _ in a] for a in after] == [[i for i, _ in b] for b in before]
    for a, b in zip(after, before, strict=True):
        assert [s for _, s in a] == pytest.approx([s for _, s in b], rel=1e-9)


async def test_a_database_holding_minilm_vectors_upgrades_in_place_with_its_model_recorded(
    scratch_dsn: str,
) -> None:
    """0017 records local/all-MiniLM-L6-v2/384 where vectors exist unrecorded; that model serves, another is refused."""
    await asyncio.to_thread(upgrade_to_head, scratch_dsn)
    await asyncio.to_thread(downgrade_to, scratch_dsn, "0016_keyword_impact_integer")
    conn = await connect(scratch_dsn)
    try:
        tenant = (await tenant_repo.create_tenant(conn, name="upgrade")).id
        await conn.copy_records_to_table(
            "memory",
            records=[
                (
                    uuid.UUID(tenant),
                    uuid.uuid4(),
                    "fact",
                    "kept",
                    "kept",
                    *FACT,
                    unit_vectors(np.random.default_rng(1), 1)[0],
                )
            ],
            columns=[*COLUMNS, "embedding"],
        )
    finally:
        await conn.close()
    await asyncio.to_thread(upgrade_to_head, scratch_dsn)
    conn = await connect(scratch_dsn)
    try:
        assert await conn.fetchval("SELECT value FROM system_config WHERE key = 'embedding'") == {
            "provider": "local",
            "model": "all-MiniLM-L6-v2",
            "dim": 384,
        }
        local = await prepare_embedding_storage(conn, Settings(), owner=True)
        assert local is not None and local.dim == 384
        other = Settings(embedding_provider="openai", embedding_model="nomic-embed-text", embedding_dim=768)
        with pytest.raises(StartupError, match="RECALLD_EMBEDDING_PROVIDER=local"):
            await prepare_embedding_storage(conn, other, owner=True)
        assert await conn.fetchval("SELECT count(*) FROM memory_vector") == 1
    finally:
        await conn.close()


async def test_numbers_stored_too_close_to_zero_become_zero_and_no_longer_break_search(
    scratch_dsn: str,
) -> None:
    """0018: rows the API once let through with decay_rate 5e-324 broke every search of their tenant."""
    await asyncio.to_thread(upgrade_to_head, scratch_dsn)
    await asyncio.to_thread(downgrade_to, scratch_dsn, "0017_embedding_model_recorded")
    conn = await connect(scratch_dsn)
    try:
        tenant = (await tenant_repo.create_tenant(conn, name="poisoned")).id
        poison = [(5e-324, 1.0, 5.0), (1.0, 1e-310, 5e-324), (1e-7, 1e-7, 1e-7)]
        await conn.copy_records_to_table(
            "memory",
            records=[
                (uuid.UUID(tenant), uuid.uuid4(), "fact", "harbor", "harbor", c, d, *FACT[2:], i)
                for d, c, i in poison
            ],
            columns=[*COLUMNS, "importance"],
        )
    finally:
        await conn.close()

    await asyncio.to_thread(upgrade_to_head, scratch_dsn)

    conn = await connect(scratch_dsn)
    try:
        stored = await conn.fetch("SELECT decay_rate, confidence, importance FROM memory")
        assert sorted(tuple(r) for r in stored) == [(0.0, 0.0, 0.0), (0.0, 1.0, 5.0), (1.0, 0.0, 0.0)]
        f = CandidateFilter(tenant_ids=[tenant], kinds=["fact"], min_confidence=1e-6)
        found = await search_by_bm25(
            conn, f=f, query_text="harbor", limit=10, postings_per_lexeme=None, candidates=50
        )
        assert len(found.rows) == 1
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(
                "UPDATE memory SET decay_rate = 5e-324 WHERE tenant_id = $1", uuid.UUID(tenant)
            )
    finally:
        await conn.close()


async def test_truth_migration_keys_existing_memories_and_dates_their_supersession(scratch_dsn: str) -> None:
    """0021 on stored data: duplicate keys as the write path makes them; a superseded fact ends when its successor came."""
    await asyncio.to_thread(upgrade_to_head, scratch_dsn)
    await asyncio.to_thread(downgrade_to, scratch_dsn, "0020_key_lifecycle")
    conn = await connect(scratch_dsn)
    old, new, orphan = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    stored = datetime(2026, 3, 1, tzinfo=UTC)
    replaced = datetime(2026, 6, 1, tzinfo=UTC)
    try:
        tenant = uuid.UUID((await tenant_repo.create_tenant(conn, name="truth")).id)
        await conn.copy_records_to_table(
            "memory",
            records=[
                (
                    tenant,
                    old,
                    "fact",
                    "User lives in Lisbon.",
                    "x",
                    1.0,
                    0.0,
                    stored,
                    "superseded",
                    None,
                    stored,
                ),
                (
                    tenant,
                    new,
                    "fact",
                    "User lives in Porto",
                    "x",
                    1.0,
                    0.0,
                    replaced,
                    "active",
                    old,
                    replaced,
                ),
                (
                    tenant,
                    orphan,
                    "fact",
                    "User works at Acme",
                    "x",
                    1.0,
                    0.0,
                    stored,
                    "superseded",
                    None,
                    stored,
                ),
            ],
            columns=[*COLUMNS, "supersedes", "created_at"],
        )
    finally:
        await conn.close()
    await asyncio.to_thread(upgrade_to_head, scratch_dsn)
    conn = await connect(scratch_dsn)
    try:
        rows = {
            r["id"]: r
            for r in await conn.fetch(
                "SELECT id, content_key, validity, valid_from, valid_to, superseded_by FROM memory"
            )
        }
    finally:
        await conn.close()
    assert bytes(rows[old]["content_key"]) == content_key("user lives in lisbon")
    assert (rows[old]["validity"], rows[old]["valid_from"], rows[old]["valid_to"]) == (
        "superseded",
        stored,
        replaced,
    )
    assert rows[old]["superseded_by"] == new
    assert (rows[new]["validity"], rows[new]["valid_from"], rows[new]["valid_to"]) == (
        "active",
        replaced,
        None,
    )
    # Its successor is gone: when it stopped being true is not known, and stays unknown.
    assert (rows[orphan]["validity"], rows[orphan]["valid_to"]) == ("superseded", None)
    await asyncio.to_thread(downgrade_to, scratch_dsn, "0020_key_lifecycle")
