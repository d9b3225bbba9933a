"""The keyword statement's plan: one generic plan per connection, and scores that no plan can change."""

from __future__ import annotations

import itertools

import asyncpg
import httpx
import pytest

from app.infra.db import tenant_transaction
from app.repositories.search import CandidateFilter
from app.repositories.search import keyword as keyword_sql
from app.retrieval.query import parse_query
from app.services.ranking import run_keyword_leg
from app.state import ServiceState
from tests.support import TenantFactory

WORDS = ("heron", "quartz", "violin", "maple")


@pytest.mark.parametrize("analyzed_rows_needed", [0.0, 1e12])
async def test_the_keyword_statement_runs_on_a_generic_plan_once_the_table_has_statistics(
    analyzed_rows_needed: float,
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    serving_conn: asyncpg.Connection,
    admin_conn: asyncpg.Connection,
    service: ServiceState,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A custom plan was made on every search (1.0 ms of planning, a third of the statement);
    # the generic one is made once per connection, but only when the statistics have seen enough
    # rows (a plan made on a nearly empty table stays after a load). Later statements plan as before.
    monkeypatch.setattr(keyword_sql, "GENERIC_PLAN_MIN_ROWS", analyzed_rows_needed)
    tenant = await make_tenant()
    for content in ("the heron stood in the reeds", "a quartz clock", "heron and quartz"):
        response = await client.post("/v1/facts", json={"content": content}, headers=tenant.headers())
        assert response.status_code == 201, response.text
    await admin_conn.execute("ANALYZE memory")
    f = CandidateFilter(tenant_ids=[tenant.id], kinds=["fact"])
    found = []
    for _ in range(3):
        async with tenant_transaction(serving_conn, [tenant.id]):
            rows, _, match_type, _ = await run_keyword_leg(
                service, serving_conn, f, parse_query("heron quartz"), 10
            )
            found.append([r.id for r in rows])
            after = await serving_conn.fetchval("SELECT current_setting('plan_cache_mode')")
    assert match_type == "bm25" and len(found[0]) == 3 and found[0] == found[1] == found[2]
    assert after == "auto"
    plans = await serving_conn.fetch(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
        "WHERE statement LIKE '%FROM keyword_block%' AND statement NOT LIKE '%pg_prepared_statements%'"
    )
    generic = analyzed_rows_needed == 0
    assert [(p["generic_plans"], p["custom_plans"]) for p in plans] == [(3, 0) if generic else (0, 3)]


async def test_memories_with_the_same_bm25_score_exactly_the_same_and_tie_break_by_age(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    # Each memory holds the four words with the term frequencies 1, 2, 3 and 5 in another order:
    # every word is in every memory (one idf), the lengths are equal, so their BM25 is the same.
    # Summed in the order the words were read, the float scores differed in the last bit and the
    # ties were ordered by that instead of newest first.
    tenant = await make_tenant()
    ids = []
    for counts in itertools.permutations((1, 2, 3, 5)):
        content = " ".join(" ".join([word] * n) for word, n in zip(WORDS, counts, strict=True))
        response = await client.post("/v1/facts", json={"content": content}, headers=tenant.headers())
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    response = await client.post(
        "/v1/search",
        json={"query": " ".join(WORDS), "mode": "keyword", "limit": 100, "min_score": 0},
        headers=tenant.headers("reader"),
    )
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert len({r["score_breakdown"]["raw_scores"]["keyword"] for r in results}) == 1
    assert [r["id"] for r in results] == ids[::-1]
