"""The turn after a written or forgotten episode is re-indexed in the same transaction: the answer tells the truth.

Re-indexing once ran after the write's commit, so a failure there answered an error (a 500, or a
503 "nothing was stored, retry") for a turn that was stored, and the client's retry stored it twice.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from app.repositories import conversation as conversation_repo
from app.services import conversation
from tests.support import TenantFactory, TenantKeys, failing_first

START = datetime(2026, 5, 1, 18, 0, tzinfo=UTC)
QUESTION, ANSWER = "Did you ever make it to the Douro valley wineries?", "Yes, twice!"
MIDDLE = "We booked a kayak tour on the Minho"


async def _turn(client: httpx.AsyncClient, tenant: TenantKeys, text: str, minutes: int) -> httpx.Response:
    return await client.post(
        "/v1/episodes",
        json={
            "content": text,
            "butler": "chat",
            "session_id": "s",
            "created_at": (START + timedelta(minutes=minutes)).isoformat(),
        },
        headers=tenant.headers(),
    )


async def _session(client: httpx.AsyncClient, tenant: TenantKeys) -> list[str]:
    for text, minutes in ((QUESTION, 0), (ANSWER, 2)):
        response = await _turn(client, tenant, text, minutes)
        assert response.status_code == 201, response.text
    return await _keyword_hits(client, tenant, "Douro wineries")


async def _keyword_hits(client: httpx.AsyncClient, tenant: TenantKeys, query: str) -> list[str]:
    found = await client.post(
        "/v1/search",
        json={"query": query, "mode": "keyword", "types": ["episode"], "min_score": 0, "limit": 20},
        headers=tenant.headers("reader"),
    )
    assert found.status_code == 200, found.text
    return sorted(r["content"] for r in found.json()["results"])


async def _turns(client: httpx.AsyncClient, tenant: TenantKeys) -> list[str]:
    listed = await client.get("/v1/memories", params={"type": "episode"}, headers=tenant.headers("reader"))
    assert listed.status_code == 200, listed.text
    return sorted(item["content"] for item in listed.json()["items"])


def _failing(exc: Exception, times: int) -> Any:
    return failing_first(conversation_repo.update_representations, exc, times)


async def test_a_deadlock_in_the_reindex_is_retried_and_the_write_answers_201(
    client: httpx.AsyncClient, make_tenant: TenantFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It answered 503 "nothing was stored, retry" for a turn that was stored."""
    tenant = await make_tenant()
    assert await _session(client, tenant) == sorted([QUESTION, ANSWER])
    # Two writers of one session re-indexing the same turn can deadlock; PostgreSQL aborts one.
    monkeypatch.setattr(
        conversation, "update_representations", _failing(asyncpg.DeadlockDetectedError("x"), 1)
    )
    written = await _turn(client, tenant, MIDDLE, 1)
    assert written.status_code == 201, written.text
    monkeypatch.undo()
    assert await _turns(client, tenant) == sorted([QUESTION, ANSWER, MIDDLE])
    # The answer is indexed with the turn now before it.
    assert await _keyword_hits(client, tenant, "kayak Minho") == sorted([MIDDLE, ANSWER])


@pytest.mark.parametrize(
    ("failure", "status"),
    [(RuntimeError("injected failure in the re-index"), 500), (ConnectionResetError("injected outage"), 503)],
)
async def test_a_write_whose_reindex_fails_stores_nothing(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    monkeypatch: pytest.MonkeyPatch,
    failure: Exception,
    status: int,
) -> None:
    """An error answer means nothing was stored: the turn and the old index both stay as they were."""
    tenant = await make_tenant()
    before = await _session(client, tenant)
    monkeypatch.setattr(conversation, "update_representations", _failing(failure, 10))
    failed = await _turn(client, tenant, MIDDLE, 1)
    assert failed.status_code == status, failed.text
    monkeypatch.undo()
    assert await _turns(client, tenant) == sorted([QUESTION, ANSWER])
    assert await _keyword_hits(client, tenant, "Douro wineries") == before
    assert await _keyword_hits(client, tenant, "kayak Minho") == []


async def test_a_forget_whose_reindex_fails_deletes_nothing(
    client: httpx.AsyncClient, make_tenant: TenantFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forgotten turn was gone while the answer said 500; now the error means it is still there."""
    tenant = await make_tenant()
    await _session(client, tenant)
    middle = await _turn(client, tenant, MIDDLE, 1)
    assert middle.status_code == 201, middle.text
    monkeypatch.setattr(
        conversation, "update_representations", _failing(RuntimeError("injected failure in the re-index"), 10)
    )
    failed = await client.delete(f"/v1/memories/{middle.json()['id']}", headers=tenant.headers())
    assert failed.status_code == 500, failed.text
    monkeypatch.undo()
    assert await _turns(client, tenant) == sorted([QUESTION, ANSWER, MIDDLE])
    assert await _keyword_hits(client, tenant, "kayak Minho") == sorted([MIDDLE, ANSWER])
    # With the database well again the forget goes through and re-indexes the answer.
    forgotten = await client.delete(f"/v1/memories/{middle.json()['id']}", headers=tenant.headers())
    assert forgotten.status_code == 204, forgotten.text
    assert await _keyword_hits(client, tenant, "kayak Minho") == []
    assert await _keyword_hits(client, tenant, "Douro wineries") == sorted([QUESTION, ANSWER])
