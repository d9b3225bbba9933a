"""Hybrid fusion through the API, with the real MiniLM model: language awareness and limit-independent depth."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.rate_limit import RateLimiter
from app.retrieval.fusion import NO_KEYWORD_MATCH
from app.state import ServiceState
from recalld_tools.evaluation.bench import generate_memories, generate_queries
from tests.support import TenantFactory, TenantKeys, search

ARABIC_MEMORIES = (
    "القهوة العربية تقدم مع التمر في المجالس",
    "يفضل المستخدم شرب الشاي الأخضر في الصباح",
    "اجتماع الفريق يوم الأحد في الساعة العاشرة",
    "المستخدم يحب قراءة كتب التاريخ والشعر",
)
CHINESE_MEMORIES = (
    "用户每天早上喝绿茶",
    "团队会议安排在星期一上午十点",
    "用户喜欢阅读历史书和诗歌",
    "北京的冬天很冷而且干燥",
)
ENGLISH_MEMORIES = (
    "The user drinks green tea every morning",
    "Team meeting is on Monday at ten",
    "The user likes reading history books and poetry",
    "Winter in Beijing is cold and dry",
)


async def _search(client: httpx.AsyncClient, tenant: TenantKeys, **body: Any) -> dict[str, Any]:
    return await search(client, tenant, **body)


async def _store_all(
    client: httpx.AsyncClient, tenant: TenantKeys, texts: tuple[str, ...] | list[str]
) -> None:
    for start in range(0, len(texts), 500):
        items = [{"type": "fact", "content": text} for text in texts[start : start + 500]]
        response = await client.post("/v1/memories:batch", json={"items": items}, headers=tenant.headers())
        assert response.status_code in (200, 201), response.text


def _ids(result: dict[str, Any]) -> list[str]:
    return [r["id"] for r in result["results"]]


async def _assert_keyword_only(
    client: httpx.AsyncClient, tenant: TenantKeys, query: str, script: str, expected_first: str
) -> None:
    keyword = await _search(client, tenant, query=query, mode="keyword")
    assert keyword["results"], "the keyword leg finds the memory in the query's own script"
    reason = f"query script {script} not covered by all-MiniLM-L6-v2"
    for mode in ("hybrid", "semantic"):
        result = await _search(client, tenant, query=query, mode=mode)
        assert result["embedding_used"] is False
        assert result["results"][0]["content"] == expected_first
        assert _ids(result) == _ids(keyword), f"{mode}: ranked by keyword alone"
        for hit in result["results"]:
            assert hit["score_breakdown"]["legs_skipped"] == {"semantic": reason}
            assert set(hit["score_breakdown"]["ranks"]) == {"keyword"}


async def test_an_arabic_query_is_ranked_by_keyword_and_says_why(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    await _store_all(client, tenant, ARABIC_MEMORIES + CHINESE_MEMORIES + ENGLISH_MEMORIES)
    await _assert_keyword_only(client, tenant, "شرب الشاي الأخضر", "arabic", ARABIC_MEMORIES[1])


async def test_a_chinese_query_is_ranked_by_keyword_and_says_why(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    await _store_all(client, tenant, ARABIC_MEMORIES + CHINESE_MEMORIES + ENGLISH_MEMORIES)
    await _assert_keyword_only(client, tenant, "喝绿茶", "han", CHINESE_MEMORIES[0])


async def test_memories_the_model_cannot_read_stay_out_of_the_semantic_leg(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    await _store_all(client, tenant, ARABIC_MEMORIES + CHINESE_MEMORIES + ENGLISH_MEMORIES)
    result = await _search(client, tenant, query="green tea in the morning", mode="semantic", min_score=0)
    assert result["embedding_used"] is True
    assert result["results"][0]["content"] == ENGLISH_MEMORIES[0]
    # Their vectors are noise to an English model: only the four English memories are candidates.
    assert sorted(r["content"] for r in result["results"]) == sorted(ENGLISH_MEMORIES)
    hybrid = await _search(client, tenant, query="green tea in the morning", min_score=0)
    assert "legs_skipped" not in hybrid["results"][0]["score_breakdown"]


async def test_a_keyword_leg_that_matched_no_query_term_gets_no_weight_and_says_why(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    await _store_all(client, tenant, ENGLISH_MEMORIES)
    # No memory holds "warm", "beverage" or "dawn", not even as part of a word.
    assert (await _search(client, tenant, query="warm beverage at dawn", mode="keyword"))["results"] == []
    result = await _search(client, tenant, query="warm beverage at dawn", min_score=0)
    assert result["results"][0]["content"] == ENGLISH_MEMORIES[0]
    for hit in result["results"]:
        breakdown = hit["score_breakdown"]
        assert breakdown["weights"] == {"keyword": 0.0, "semantic": 1.0}
        assert breakdown["legs_skipped"] == {"keyword": NO_KEYWORD_MATCH}


async def test_a_shorter_limit_returns_a_prefix_of_a_longer_one(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    service: ServiceState,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Some 800 searches in a row: this test is about ranking, so the per-key rate limit is lifted.
    monkeypatch.setattr(service, "rate_limiter", RateLimiter(per_second=1e6, burst=10**6))
    tenant = await make_tenant()
    await _store_all(client, tenant, generate_memories(600, seed=5))
    limit = 10
    differing = []
    # Every query with the default fusion; the first ten with each fusion named explicitly.
    for number, query in enumerate(generate_queries(50, seed=6)):
        for fusion in (None, "rrf", "weighted") if number < 10 else (None,):
            body: dict[str, Any] = {"query": query} if fusion is None else {"query": query, "fusion": fusion}
            longest = _ids(await _search(client, tenant, **body, limit=100))
            for k in range(1, limit + 1):
                shorter = _ids(await _search(client, tenant, **body, limit=k))
                if shorter != longest[:k]:
                    differing.append((query, fusion, k))
    assert differing == []
