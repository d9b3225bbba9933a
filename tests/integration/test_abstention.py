"""Calibrated scores and abstention: a search or recall about something never stored answers nothing."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support import TenantFactory, TenantKeys

FACTS = (
    "User works as a nurse at the city hospital",
    "User's favourite cuisine is Thai food",
    "User has a golden retriever named Biscuit",
    "User lives in Leeds with their partner",
    "User is allergic to penicillin",
    "User plays the violin in a community orchestra",
    "User's sister is called Priya",
    "User prefers morning meetings before 10am",
)


async def _store_facts(client: httpx.AsyncClient, tenant: TenantKeys) -> None:
    items = [{"type": "fact", "content": text, "importance": 9} for text in FACTS]
    response = await client.post("/v1/memories:batch", json={"items": items}, headers=tenant.headers())
    assert response.status_code == 201, response.text


async def _post(
    client: httpx.AsyncClient, tenant: TenantKeys, path: str, body: dict[str, Any]
) -> dict[str, Any]:
    response = await client.post(path, json=body, headers=tenant.headers("reader"))
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def test_a_search_about_something_never_stored_abstains(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    await _store_facts(client, tenant)
    unrelated = await _post(
        client, tenant, "/v1/search", {"query": "quantum chromodynamics lattice simulations"}
    )
    assert unrelated["results"] == []
    assert unrelated["abstained"] is True
    assert 0 <= unrelated["best_score"] < 0.5
    # min_score 0 is the best-effort list: the same question answers, with the same best score.
    best_effort = await _post(
        client, tenant, "/v1/search", {"query": "quantum chromodynamics lattice simulations", "min_score": 0}
    )
    assert len(best_effort["results"]) == len(FACTS)
    assert best_effort["abstained"] is False
    assert best_effort["results"][0]["score"] == unrelated["best_score"]
    # Something that was stored is still found with the defaults.
    answered = await _post(client, tenant, "/v1/search", {"query": "What is the name of the user's dog?"})
    assert answered["abstained"] is False
    assert answered["results"][0]["content"] == "User has a golden retriever named Biscuit"


async def test_a_new_users_facts_answer_what_was_stored_and_nothing_else(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    # Ten facts of a new user: the scope is far smaller than any set the score was fitted on.
    tenant = await make_tenant()
    await _store_facts(client, tenant)
    extra = [
        {"type": "fact", "content": text}
        for text in ("User is allergic to peanuts", "The user's cat is named Miso")
    ]
    response = await client.post("/v1/memories:batch", json={"items": extra}, headers=tenant.headers())
    assert response.status_code == 201, response.text
    for query, expected in (
        ("peanut allergy", "User is allergic to peanuts"),
        ("what is the cat called", "The user's cat is named Miso"),
        ("where does the user live", "User lives in Leeds with their partner"),
    ):
        answered = await _post(client, tenant, "/v1/search", {"query": query})
        assert answered["abstained"] is False, query
        assert answered["results"][0]["content"] == expected
    for query in (
        "favourite football team",
        "what car does the user drive",
        "stock market forecast for next year",
    ):
        unrelated = await _post(client, tenant, "/v1/search", {"query": query})
        assert (unrelated["results"], unrelated["abstained"]) == ([], True), query


async def test_an_answered_search_shows_what_is_half_as_likely_relevant_as_its_best(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    # The floor (0.04) decides whether a search is answered; after that a result is cut relative to
    # the best one, so the list does not stop between two results of almost the same score.
    tenant = await make_tenant()
    await _store_facts(client, tenant)
    extra = [{"type": "fact", "content": "The user's cat is named Miso"}]
    response = await client.post("/v1/memories:batch", json={"items": extra}, headers=tenant.headers())
    assert response.status_code == 201, response.text
    for query in ("user's pets", "where does the user work", "quantum chromodynamics lattice simulations"):
        best_effort = (await _post(client, tenant, "/v1/search", {"query": query, "min_score": 0}))["results"]
        default = (await _post(client, tenant, "/v1/search", {"query": query}))["results"]
        best = best_effort[0]["score"]
        cut = min(0.04, best / 2) if best >= 0.04 else 0.04
        assert [r["id"] for r in default] == [r["id"] for r in best_effort if r["score"] >= cut], query
    # Both pets answer (about 0.048 and 0.047), and the next fact (about 0.026) is shown too: it is more
    # than half as likely relevant as the best, though under the floor.
    pets = (await _post(client, tenant, "/v1/search", {"query": "user's pets"}))["results"]
    assert {r["content"] for r in pets[:2]} == {
        "User has a golden retriever named Biscuit",
        "The user's cat is named Miso",
    }
    assert len(pets) == 3 and pets[2]["score"] < 0.04


async def test_recall_never_returns_a_memory_below_the_relevance_floor(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    await _store_facts(client, tenant)
    # Every fact is important (9) and new: before, importance, recency and confidence carried
    # unrelated facts into the answer.
    unrelated = await _post(
        client, tenant, "/v1/recall", {"topic": "quantum chromodynamics lattice simulations"}
    )
    assert unrelated["results"] == []
    assert unrelated["abstained"] is True
    related = await _post(client, tenant, "/v1/recall", {"topic": "the user's dog"})
    assert related["abstained"] is False
    assert related["results"][0]["content"] == "User has a golden retriever named Biscuit"


async def test_every_surface_says_what_the_score_means(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    # An agent or developer reads the score's meaning where they meet it: the OpenAPI document,
    # the MCP tool list and the console.
    schemas = (await client.get("/openapi.json")).json()["components"]["schemas"]
    assert (
        "probability that the memory is relevant"
        in schemas["SearchResult"]["properties"]["score"]["description"]
    )
    assert "probability" in schemas["RecallResult"]["properties"]["relevance"]["description"]
    assert "abstained: true" in schemas["SearchIn"]["properties"]["min_score"]["description"].replace("`", "")
    assert "min_score: 0" in schemas["SearchOut"]["properties"]["abstained"]["description"].replace("`", "")
    tenant = await make_tenant()
    answer = await client.post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        headers={
            **tenant.headers("reader"),
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18",
        },
    )
    tools = {tool["name"]: tool for tool in answer.json()["result"]["tools"]}
    assert "probability" in tools["memory_search"]["description"]
    assert "abstained: true" in tools["memory_search"]["description"]
    assert "never recalled" in tools["memory_recall"]["description"]
    console = (await client.get("/console/console.js")).text
    assert "the score is the estimated probability that the result is relevant" in console
