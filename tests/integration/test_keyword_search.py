"""Keyword tiers (BM25, CJK bigrams, ILIKE), query safety, fusion modes, keyword-only service."""

from __future__ import annotations

import random
import string
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.infra.config import Settings
from app.main import create_app
from tests.support import TenantFactory, TenantKeys, running, search


async def _store(client: httpx.AsyncClient, tenant: TenantKeys, content: str) -> str:
    response = await client.post("/v1/facts", json={"content": content}, headers=tenant.headers())
    assert response.status_code == 201, response.text
    memory_id: str = response.json()["id"]
    return memory_id


async def _search(client: httpx.AsyncClient, tenant: TenantKeys, **body: Any) -> dict[str, Any]:
    return await search(client, tenant, **{"min_score": 0, **body})


async def test_cjk_memories_are_found_by_bigrams_and_mixed_queries(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    chinese = await _store(client, tenant, "用户每天早上喝咖啡，不加糖")
    japanese = await _store(client, tenant, "東京の天気は明日晴れです")
    korean = await _store(client, tenant, "사용자는 아침마다 커피를 마십니다")
    await _store(client, tenant, "The user drinks tea in the afternoon")
    coffee = await _search(client, tenant, query="咖啡", mode="keyword")
    assert [r["id"] for r in coffee["results"]] == [chinese]
    content = coffee["results"][0]["content"]
    assert [content[a:b] for a, b in coffee["results"][0]["highlights"]] == ["咖啡"]
    weather = await _search(client, tenant, query="天気", mode="keyword")
    assert [r["id"] for r in weather["results"]] == [japanese]
    korean_hits = await _search(client, tenant, query="커피", mode="keyword")
    assert [r["id"] for r in korean_hits["results"]] == [korean]
    mixed = await _search(client, tenant, query="用户 coffee", mode="keyword")
    assert mixed["results"][0]["id"] == chinese
    hybrid = await _search(client, tenant, query="用户 coffee")
    assert chinese in [r["id"] for r in hybrid["results"]]


async def test_ilike_fallback_finds_partial_identifiers(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    target = await _store(client, tenant, "authenticateUserWithToken() checks the session before login")
    await _store(client, tenant, "The session store is Redis")
    result = await _search(client, tenant, query="UserWithTok", mode="keyword")
    assert [r["id"] for r in result["results"]] == [target]
    assert result["results"][0]["match_type"] == "fulltext"
    assert 0 < result["results"][0]["score_breakdown"]["raw_scores"]["keyword"] < 1


async def test_any_punctuation_is_safe(client: httpx.AsyncClient, make_tenant: TenantFactory) -> None:
    tenant = await make_tenant()
    login = await _store(client, tenant, "func login() validates the password hash")
    rng = random.Random(7)
    noise = "".join(rng.choice(string.printable + "用户한국語'\"\\") for _ in range(4000))
    queries = [
        "func login()",
        '"unbalanced quote',
        "it's",
        "&|!:*()<>",
        "a & b | !c <-> d:*",
        "\\",
        "'''",
        "login:* & (",
        noise,
        "🙂 emoji login",
    ]
    for query in queries:
        for mode in ("keyword", "hybrid", "semantic"):
            response = await client.post(
                "/v1/search", json={"query": query, "mode": mode}, headers=tenant.headers("reader")
            )
            assert response.status_code == 200, (query, mode, response.text)
    found = await _search(client, tenant, query="func login()", mode="keyword")
    assert [r["id"] for r in found["results"]] == [login]
    for blank in ("", "   ", "\n\t"):
        empty = await _search(client, tenant, query=blank)
        assert empty["results"] == []
    too_long = await client.post("/v1/search", json={"query": "x" * 4001}, headers=tenant.headers("reader"))
    assert too_long.status_code == 422
    assert "4000" in too_long.json()["error"]["message"]
    too_many = await client.post(
        "/v1/search", json={"query": "x", "limit": 101}, headers=tenant.headers("reader")
    )
    assert too_many.status_code == 422


async def test_keyword_leg_returns_only_matching_rows(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    match = await _store(client, tenant, "The zeppelin hangar opens at dawn")
    for i in range(20):
        await _store(client, tenant, f"Unrelated memory {i} about spreadsheets")
    result = await _search(client, tenant, query="zeppelin", mode="keyword", limit=10)
    assert [r["id"] for r in result["results"]] == [match]


async def _batch(client: httpx.AsyncClient, tenant: TenantKeys, items: list[dict[str, Any]]) -> list[str]:
    response = await client.post("/v1/memories:batch", json={"items": items}, headers=tenant.headers())
    assert response.status_code == 201, response.text
    return [item["id"] for item in response.json()["items"]]


def _keyword_scores(result: dict[str, Any]) -> dict[str, float]:
    return {r["id"]: r["score_breakdown"]["raw_scores"]["keyword"] for r in result["results"]}


async def test_small_tenant_among_big_ones_gets_its_own_bm25(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    small = await make_tenant("small")
    mine = await _batch(
        client,
        small,
        [{"type": "fact", "content": f"The heron nests by pond number {i}"} for i in range(12)]
        + [{"type": "fact", "content": "A kingfisher and a heron share the reeds"}],
    )
    before = await _search(client, small, query="heron reeds", mode="keyword", limit=10)
    assert len(before["results"]) == 10
    assert before["results"][0]["id"] == mine[-1]  # the only row with both terms

    # Other tenants fill the table with the same words: statistics and the top-k stay per tenant.
    for _ in range(2):
        big = await make_tenant("big")
        await _batch(
            client,
            big,
            [{"type": "fact", "content": f"Heron sighting {i} near the reeds"} for i in range(300)],
        )
    after = await _search(client, small, query="heron reeds", mode="keyword", limit=10)
    assert [r["id"] for r in after["results"]] == [r["id"] for r in before["results"]]
    assert set(_keyword_scores(after)) <= set(mine)
    assert _keyword_scores(after) == _keyword_scores(before)


async def test_selective_filters_still_fill_the_limit(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    # Short facts repeating the word outrank every episode, more of them than the first BM25 cut.
    await _batch(client, tenant, [{"type": "fact", "content": f"walrus walrus {i}"} for i in range(260)])
    episodes = await _batch(
        client,
        tenant,
        [
            {
                "type": "episode",
                "butler": "zoo",
                "content": f"On a long and windy afternoon tour number {i} the keeper fed one walrus",
            }
            for i in range(6)
        ],
    )
    result = await _search(client, tenant, query="walrus", mode="keyword", types=["episode"], limit=5)
    assert len(result["results"]) == 5
    assert {r["id"] for r in result["results"]} <= set(episodes)
    assert all(r["match_type"] == "bm25" for r in result["results"])


async def test_weighted_and_rrf_scores_follow_their_formulas(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    for text in (
        "Pasta carbonara uses eggs, pecorino and guanciale",
        "The user cooks pasta on Sundays",
        "Guanciale is cured pork cheek",
        "The car needs new tyres",
    ):
        await _store(client, tenant, text)
    query = "pasta with guanciale"
    weighted = await _search(client, tenant, query=query, fusion="weighted", limit=10)
    assert weighted["results"]
    for hit in weighted["results"]:
        raw = hit["score_breakdown"]["raw_scores"]
        expected = 0.7 * max(0.0, raw["semantic"] or 0.0) + 0.3 * (raw["keyword"] or 0.0)
        assert hit["score"] == pytest.approx(expected, abs=1e-5)
        assert hit["score_breakdown"]["fusion"] == "weighted"
    rrf = await _search(client, tenant, query=query, limit=10, fusion="rrf")
    for hit in rrf["results"]:
        ranks = hit["score_breakdown"]["ranks"]
        # Missing from a leg: one rank below the legs' depth, 100 whatever the limit.
        expected = sum(1 / (60 + (ranks[leg] or 101)) for leg in ("semantic", "keyword")) / (2 / 61)
        assert hit["score"] == pytest.approx(expected, abs=1e-5)
    # min_score applies to the normalised RRF score (R-S6). Its floor is 61/160 ≈ 0.38 (rank 100
    # in one leg, missing from the other), so the default 0.1 drops only decayed hits; higher
    # values do filter.
    strict = await _search(client, tenant, query=query, limit=10, fusion="rrf", min_score=0.9)
    assert [h["id"] for h in strict["results"]] == [h["id"] for h in rrf["results"] if h["score"] >= 0.9]
    assert 0 < len(strict["results"]) < len(rrf["results"])
    tilted = await _search(
        client,
        tenant,
        query=query,
        limit=10,
        fusion="rrf",
        weights={"semantic": 0.9, "keyword": 0.1, "k": 10},
    )
    for hit in tilted["results"]:
        ranks = hit["score_breakdown"]["ranks"]
        expected = (0.9 / (10 + (ranks["semantic"] or 101)) + 0.1 / (10 + (ranks["keyword"] or 101))) / (
            1.0 / 11
        )
        assert hit["score"] == pytest.approx(expected, abs=1e-5)


@pytest.fixture(scope="module")
async def keyword_only_app(settings: Settings, app: FastAPI) -> AsyncIterator[FastAPI]:
    """A second service on the same database with the embedding provider switched off."""
    async with running(create_app(settings.model_copy(update={"embedding_provider": "none"}))) as application:
        yield application


async def test_keyword_only_service_degrades_and_says_so(
    keyword_only_app: FastAPI, client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    transport = httpx.ASGITransport(app=keyword_only_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://kw.test") as kw:
        stored = await kw.post(
            "/v1/facts", json={"content": "The lighthouse keeper runs at dawn"}, headers=tenant.headers()
        )
        assert stored.status_code == 201
        for mode in ("hybrid", "semantic", "keyword"):
            result = await kw.post(
                "/v1/search", json={"query": "running", "mode": mode}, headers=tenant.headers()
            )
            body = result.json()
            assert result.status_code == 200
            assert body["embedding_used"] is False and body["mode"] == "keyword"
            assert [r["content"] for r in body["results"]] == ["The lighthouse keeper runs at dawn"]
        recall = await kw.post("/v1/recall", json={"topic": "lighthouse"}, headers=tenant.headers())
        assert recall.json()["embedding_used"] is False
        assert len(recall.json()["results"]) == 1
        ready = await kw.get("/readyz")
        assert ready.json()["checks"]["embedder"] == {"provider": "none", "loaded": False}
    # The row written without an embedding is still found by the keyword leg of the full service.
    full = await _search(client, tenant, query="lighthouse keeper")
    assert [r["content"] for r in full["results"]] == ["The lighthouse keeper runs at dawn"]
