"""Conversation context: an episode hit carries its neighbouring turns of the same session."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx

from app.api.schemas.retrieval import SearchOut
from tests.support import TenantFactory, TenantKeys, search

START = datetime(2026, 5, 1, 18, 0, tzinfo=UTC)
TURNS = (
    "Hi, how was your weekend?",
    "Great, we went to the coast.",
    "Nice! Did you swim?",
    "Yes, and I finally tried paddleboarding at Porthcurno.",
    "How did it go?",
    "I fell in twice but loved it.",
    "Let's go together next time.",
)


async def _store_session(
    client: httpx.AsyncClient,
    tenant: TenantKeys,
    session: str,
    turns: tuple[str, ...],
    butler: str = "chat",
) -> list[str]:
    items = [
        {
            "type": "episode",
            "content": text,
            "butler": butler,
            "session_id": session,
            "created_at": (START + timedelta(minutes=i)).isoformat(),
            "metadata": {"turn": i},
        }
        for i, text in enumerate(turns)
    ]
    response = await client.post("/v1/memories:batch", json={"items": items}, headers=tenant.headers())
    assert response.status_code == 201, response.text
    return [item["id"] for item in response.json()["items"]]


async def _search(client: httpx.AsyncClient, tenant: TenantKeys, query: str, **body: Any) -> dict[str, Any]:
    return await search(client, tenant, query=query, **body)


def _hit(result: dict[str, Any], memory_id: str) -> dict[str, Any]:
    hits: list[dict[str, Any]] = [r for r in result["results"] if r["id"] == memory_id]
    assert len(hits) == 1, [r["content"] for r in result["results"]]
    return hits[0]


async def test_episode_hit_carries_its_neighbouring_turns_outside_the_limit(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    ids = await _store_session(client, tenant, "s1", TURNS)
    result = await _search(client, tenant, "paddleboarding Porthcurno", limit=2, context_window=2)
    assert len(result["results"]) == 2
    # Turn 4 is indexed with turn 3 before it, so it matches too (see test_episode_indexed_with_...).
    assert {r["id"] for r in result["results"]} == {ids[3], ids[4]}
    hit = _hit(result, ids[3])
    assert [(t["id"], t["offset"]) for t in hit["context"]] == [
        (ids[1], -2),
        (ids[2], -1),
        (ids[4], 1),
        (ids[5], 2),
    ]
    assert [t["content"] for t in hit["context"]] == [TURNS[1], TURNS[2], TURNS[4], TURNS[5]]
    assert hit["context"][0]["metadata"] == {"turn": 1}
    assert SearchOut.model_validate(result).model_dump(mode="json") == result
    # Context is not counted as retrieval: the neighbours' reference counts do not move.
    got = await client.get(f"/v1/memories/{ids[2]}", headers=tenant.headers("reader"))
    assert got.json()["reference_count"] == 1

    edge = await _search(client, tenant, "weekend", limit=2, context_window=3)
    assert [t["offset"] for t in _hit(edge, ids[0])["context"]] == [1, 2, 3]

    default = await _search(client, tenant, "paddleboarding Porthcurno", limit=2)
    assert all("context" not in r for r in default["results"])


async def test_context_stays_in_the_session_the_agent_and_the_tenant(
    client: httpx.AsyncClient, make_tenant: TenantFactory, admin_conn: asyncpg.Connection
) -> None:
    tenant, other = await make_tenant(), await make_tenant()
    ids = await _store_session(client, tenant, "s1", TURNS)
    # The API refuses an expires_at in the past, so turn 2 is expired in the database.
    await admin_conn.execute(
        "UPDATE memory SET expires_at = $2 WHERE id = $1", uuid.UUID(ids[2]), START + timedelta(days=1)
    )
    await _store_session(client, tenant, "s2", ("We talked about paddleboarding prices.",))
    # The same session id under another agent, and in another tenant, is another conversation.
    await _store_session(client, tenant, "s1", ("Another agent's turn in s1",), butler="planner")
    await _store_session(
        client, other, "s1", ("Other tenant: secret turn one", "Other tenant: secret turn two")
    )
    result = await _search(client, tenant, "paddleboarding Porthcurno", limit=2, context_window=2)
    hit = _hit(result, ids[3])
    # Turn 2 has expired: the window reaches past it to turn 1 and turn 0.
    assert [t["id"] for t in hit["context"]] == [ids[0], ids[1], ids[4], ids[5]]
    assert all("secret" not in t["content"] and "Another agent" not in t["content"] for t in hit["context"])


async def test_facts_and_sessionless_episodes_get_no_context(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    await client.post(
        "/v1/facts", json={"content": "Paddleboarding needs calm water"}, headers=tenant.headers()
    )
    await client.post(
        "/v1/episodes",
        json={"content": "Tried paddleboarding alone", "butler": "chat"},
        headers=tenant.headers(),
    )
    result = await _search(client, tenant, "paddleboarding", context_window=2)
    assert len(result["results"]) == 2
    assert all("context" not in r for r in result["results"])


async def test_turns_stored_at_the_same_time_are_ordered_by_id(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    items = [
        {
            "type": "episode",
            "content": text,
            "butler": "chat",
            "session_id": "same",
            "created_at": START.isoformat(),
        }
        for text in ("kayak one", "canoe two", "rowing three")
    ]
    response = await client.post("/v1/memories:batch", json={"items": items}, headers=tenant.headers())
    ids = sorted(item["id"] for item in response.json()["items"])
    by_id = {item["id"]: item["content"] for item in response.json()["items"]}
    middle = await _search(client, tenant, by_id[ids[1]].split()[0], limit=3, context_window=1)
    assert [t["id"] for t in _hit(middle, ids[1])["context"]] == [ids[0], ids[2]]


async def _keyword_hits(client: httpx.AsyncClient, tenant: TenantKeys, query: str) -> list[str]:
    result = await _search(client, tenant, query, mode="keyword", min_score=0, limit=20)
    return [r["content"] for r in result["results"]]


async def test_episode_is_indexed_with_the_turn_before_it_and_reindexed_when_that_changes(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant, other = await make_tenant(), await make_tenant()
    # Another tenant's turn in a session of the same name, just before ours, must never leak in.
    await _store_session(client, other, "s", ("The zeppelin museum opens in May",))
    question, answer = "Did you ever make it to the Douro valley wineries?", "Yes, twice!"
    await _store_session(client, tenant, "s", (question,))
    answer_id = (await _store_at(client, tenant, "s", answer, minutes=2))["id"]
    # The answer's own words never say where: the question before it does.
    assert set(await _keyword_hits(client, tenant, "Douro wineries")) == {question, answer}
    assert await _keyword_hits(client, tenant, "zeppelin museum") == []

    # A turn written between them later: the answer is re-indexed with it instead.
    middle = await _store_at(client, tenant, "s", "We booked a kayak tour on the Minho", minutes=1)
    assert set(await _keyword_hits(client, tenant, "kayak Minho")) == {middle["content"], answer}
    # ...and the new turn itself is indexed with the question, now right before it.
    assert set(await _keyword_hits(client, tenant, "Douro wineries")) == {question, middle["content"]}

    # Forgetting it puts the question back in front of the answer.
    response = await client.delete(f"/v1/memories/{middle['id']}", headers=tenant.headers())
    assert response.status_code == 204
    assert await _keyword_hits(client, tenant, "kayak Minho") == []
    assert set(await _keyword_hits(client, tenant, "Douro wineries")) == {question, answer}
    # Content is never changed by the representation.
    got = await client.get(f"/v1/memories/{answer_id}", headers=tenant.headers("reader"))
    assert got.json()["content"] == answer


async def test_an_episode_is_embedded_as_the_turn_alone(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    question, answer = "Did you ever make it to the Douro valley wineries?", "Yes, twice!"
    question_id, answer_id = await _store_session(client, tenant, "s", (question, answer))

    async def cosines() -> list[float]:
        result = await _search(client, tenant, "Douro valley wineries", mode="semantic", min_score=0)
        return [
            _hit(result, i)["score_breakdown"]["raw_scores"]["semantic"] for i in (question_id, answer_id)
        ]

    asked, answered = await cosines()
    # "Yes, twice!" alone is far from the wineries; embedded with the question it would be near it.
    assert answered < asked / 2
    # A turn written before it later changes its keyword text only, never its vector.
    await _store_at(client, tenant, "s", "We booked a kayak tour on the Minho", minutes=0)
    assert await cosines() == [asked, answered]


async def _store_at(
    client: httpx.AsyncClient, tenant: TenantKeys, session: str, text: str, *, minutes: int
) -> dict[str, Any]:
    response = await client.post(
        "/v1/episodes",
        json={
            "content": text,
            "butler": "chat",
            "session_id": session,
            "created_at": (START + timedelta(minutes=minutes)).isoformat(),
        },
        headers=tenant.headers(),
    )
    assert response.status_code == 201, response.text
    stored: dict[str, Any] = response.json()
    return stored


async def test_turns_sharing_a_created_at_keep_their_write_order(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    # A transcript importer stores every turn of a session with the session's date: session order
    # is then write order (batch position, then the next batch), never a random id (R-S17).
    tenant = await make_tenant()
    first = [f"Turn {i}: we talked about item number {i}." for i in range(6)]
    second = [f"Turn {i}: we talked about item number {i}." for i in range(6, 10)]
    ids: list[str] = []
    for turns in (first, second):
        items = [
            {
                "type": "episode",
                "content": text,
                "butler": "chat",
                "session_id": "s1",
                "created_at": START.isoformat(),
            }
            for text in turns
        ]
        response = await client.post("/v1/memories:batch", json={"items": items}, headers=tenant.headers())
        assert response.status_code == 201, response.text
        ids += [item["id"] for item in response.json()["items"]]
    # Turn 7 is indexed with turn 6 before it, so both match; the hit on turn 6 is the one looked at.
    result = await _search(client, tenant, "Turn 6 item number 6", limit=2, context_window=3, min_score=0)
    hit = _hit(result, ids[6])
    assert [t["id"] for t in hit["context"]] == [ids[3], ids[4], ids[5], ids[7], ids[8], ids[9]]
    assert [t["offset"] for t in hit["context"]] == [-3, -2, -1, 1, 2, 3]
