"""recalld-client against a real uvicorn server on the session's PostgreSQL, as an agent builder uses it.

The server runs keyword-only (not about semantics: every query shares words with what it finds), in
a thread of its own, so the blocking Client is called exactly as a user would call it.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.cli.admin import build_server
from app.infra.config import Settings
from app.main import create_app
from recalld_client import (
    APIConnectionError,
    AsyncClient,
    AuthenticationError,
    Client,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
)
from recalld_client.models import BatchEpisode, BatchFact, MemoryOut, SearchFilters
from tests.support import TenantFactory, TenantKeys


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def serving(settings: Settings, **overrides: Any) -> Iterator[str]:
    """A real uvicorn server as `recalld serve` builds it, in its own thread and event loop."""
    own = settings.model_copy(update={"embedding_provider": "none", "port": _free_port(), **overrides})
    server = build_server(create_app(own), own)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{own.port}"
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture(scope="module")
def base_url(settings: Settings, app: FastAPI) -> Iterator[str]:
    # Without a rate limit: the rate-limit test starts a server of its own.
    with serving(settings, rate_limit_per_second=0) as url:
        yield url


@pytest.fixture
async def tenant(make_tenant: TenantFactory) -> TenantKeys:
    return await make_tenant("client")


@pytest.fixture
def recalld(base_url: str, tenant: TenantKeys) -> Iterator[Client]:
    with Client(base_url, tenant.writer) as client:
        yield client


def test_store_search_recall_get_confirm_forget(recalld: Client) -> None:
    fact = recalld.memory_store_fact(
        content="The user is lactose intolerant",
        subject="user",
        predicate="diet",
        importance=8,
        scope="health",
        tags=["diet"],
        metadata={"source": "onboarding"},
    )
    assert (fact.type, fact.subject, fact.scope, fact.tags) == ("fact", "user", "health", ["diet"])
    assert fact.metadata == {"source": "onboarding"} and fact.effective_confidence == 1.0
    recalld.memory_store_rule(content="Always answer in British English")

    found = recalld.memory_search(query="lactose intolerant", limit=5)
    assert [r.id for r in found.results] == [fact.id]
    hit = found.results[0]
    assert hit.content == fact.content and 0 < hit.score <= 1
    assert hit.metadata == {"source": "onboarding"} and hit.match_type in {"bm25", "fulltext"}
    assert recalld.memory_search(query="lactose", scope="work").results == []

    recalled = recalld.memory_recall(topic="lactose intolerant user", limit=3)
    assert recalled.results[0].id == fact.id and recalled.results[0].effective_confidence == 1.0

    got = recalld.memory_get(fact.id)
    assert got.id == fact.id and got.reference_count >= 2  # search, recall and get each count
    assert recalld.memory_confirm(str(fact.id)).last_confirmed_at is not None

    recalld.memory_forget(fact.id)
    with pytest.raises(NotFoundError) as missing:
        recalld.memory_get(fact.id)
    assert (missing.value.status, missing.value.code) == (404, "not_found")
    assert missing.value.message == "memory not found"


def test_iter_memories_walks_every_page_newest_first(recalld: Client) -> None:
    stored = [recalld.memory_store_fact(content=f"page walk fact {n}", scope="pages") for n in range(5)]
    first = recalld.memory_list(type="fact", scope="pages", limit=2)
    assert len(first.items) == 2 and first.next_cursor is not None
    walked = list(recalld.iter_memories("fact", scope="pages", page_size=2))
    assert [m.id for m in walked] == [m.id for m in reversed(stored)]


def test_batch_and_episodes(recalld: Client) -> None:
    batch = recalld.memory_store_batch(
        [
            BatchFact(content="Ana is the user's sister", subject="Ana"),
            {"type": "rule", "content": "Never book flights before 8am"},
            BatchEpisode(content="Booked a table at Luigi's", butler="concierge", session_id="s1"),
        ]
    )
    assert [(m.type, m.content) for m in batch.items] == [
        ("fact", "Ana is the user's sister"),
        ("rule", "Never book flights before 8am"),
        ("episode", "Booked a table at Luigi's"),
    ]
    episode = recalld.memory_store_episode(content="Paid the deposit", butler="concierge", session_id="s1")
    assert episode.butler == "concierge" and episode.expires_at is not None


def test_duplicates_supersession_and_history(recalld: Client) -> None:
    first = recalld.memory_store_fact(
        content="The user's dentist is Dr. Okafor on Rua Augusta.", subject="user", scope="truth"
    )
    again = recalld.memory_store_fact(
        content="the user's dentist is dr. okafor on rua augusta", subject="user", scope="truth"
    )
    assert (first.duplicate_of, again.id, again.duplicate_of) == (None, first.id, first.id)

    lisbon = recalld.memory_store_fact(
        content="The user lives in Lisbon",
        subject="user",
        predicate="lives_in",
        scope="truth",
        valid_from=datetime(2025, 3, 1, tzinfo=UTC),
    )
    porto = recalld.memory_store_fact(
        content="The user lives in Porto",
        subject="user",
        predicate="lives_in",
        scope="truth",
        supersede="subject_predicate",
        valid_from=datetime(2026, 2, 1, tzinfo=UTC),
    )
    assert porto.superseded == [lisbon.id]
    history = recalld.memory_history(lisbon.id)
    assert [(m.id, m.validity) for m in history.items] == [(porto.id, "active"), (lisbon.id, "superseded")]
    assert history.items[1].valid_to == datetime(2026, 2, 1, tzinfo=UTC)

    now = recalld.memory_search(query="lives", scope="truth")
    assert [r.id for r in now.results] == [porto.id]
    last_year = datetime(2025, 9, 1, tzinfo=UTC)
    then = recalld.memory_search(query="lives", scope="truth", as_of=last_year)
    assert [r.id for r in then.results] == [lisbon.id]
    assert [r.id for r in recalld.memory_recall(topic="lives", scope="truth", as_of=last_year).results] == [
        lisbon.id
    ]
    listed = recalld.iter_memories("fact", scope="truth", as_of=last_year)
    assert [m.id for m in listed] == [lisbon.id]


def test_errors_carry_the_api_code_message_and_details(base_url: str, tenant: TenantKeys) -> None:
    with Client(base_url, "rk_00000000_" + "x" * 43) as stranger, pytest.raises(AuthenticationError) as auth:
        stranger.memory_search(query="anything")
    assert (auth.value.status, auth.value.code) == (401, "unauthorized")

    with Client(base_url, tenant.reader) as reader, pytest.raises(PermissionDeniedError) as denied:
        reader.memory_store_fact(content="readers cannot write")
    assert denied.value.code == "forbidden" and "writer" in denied.value.message

    with Client(base_url, tenant.writer) as writer:
        with pytest.raises(InvalidRequestError) as invalid:
            writer.memory_store_fact(content="too important", importance=11)
        assert invalid.value.status == 422 and invalid.value.code == "validation_error"
        assert invalid.value.details[0]["loc"] == ["body", "importance"]
        with pytest.raises(ConflictError) as conflict:
            writer.memory_store_fact(content="first", idempotency_key="same-key")
            writer.memory_store_fact(content="second", idempotency_key="same-key")
        assert conflict.value.code == "idempotency_conflict"
        # Nothing of the refused writes was stored.
        assert [m.content for m in writer.iter_memories("fact")] == ["first"]


class _LoseFirstAnswer(httpx.BaseTransport):
    """The real network, except that the first answer to a write is lost after the server stored it."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.sent: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        response.read()
        self.sent.append(request.url.path)
        if request.method == "POST" and self.sent.count(request.url.path) == 1:
            raise httpx.RemoteProtocolError("server disconnected without sending a response", request=request)
        return response


def test_a_write_whose_answer_was_lost_is_retried_and_stored_once(base_url: str, tenant: TenantKeys) -> None:
    transport = _LoseFirstAnswer()
    with httpx.Client(transport=transport) as http:
        recalld = Client(base_url, tenant.writer, http_client=http)
        fact = recalld.memory_store_fact(content="The boiler was serviced in March")
        assert transport.sent == ["/v1/facts", "/v1/facts"]
        assert [m.id for m in recalld.iter_memories("fact")] == [fact.id]

        # Without idempotency keys a lost answer is not resent: it might store the write twice.
        unkeyed = Client(base_url, tenant.writer, http_client=http, idempotency_keys=False)
        with pytest.raises(APIConnectionError):
            unkeyed.memory_store_rule(content="Water the plants on Sundays")
        assert transport.sent.count("/v1/rules") == 1


def test_rate_limited_requests_wait_for_retry_after(
    settings: Settings, app: FastAPI, tenant: TenantKeys
) -> None:
    with serving(settings, rate_limit_per_second=1, rate_limit_burst=1) as url:
        statuses: list[int] = []
        with httpx.Client(event_hooks={"response": [lambda r: statuses.append(r.status_code)]}) as http:
            patient = Client(url, tenant.writer, http_client=http)
            stored = [patient.memory_store_fact(content=f"limited write {n}") for n in range(3)]
        assert 429 in statuses and statuses[-1] == 201
        assert len({m.id for m in stored}) == 3

        with Client(url, tenant.writer, max_retries=0) as impatient, pytest.raises(RateLimitError) as limited:
            for _ in range(3):
                impatient.memory_search(query="limited")
        assert limited.value.code == "too_many_requests" and limited.value.retry_after == 1


def test_an_unreachable_server_is_a_connection_error() -> None:
    with (
        Client(f"http://127.0.0.1:{_free_port()}", "rk_x", max_retries=1) as nowhere,
        pytest.raises(APIConnectionError),
    ):
        nowhere.healthz()


def test_documents_code_and_scope_settings(base_url: str, tenant: TenantKeys, recalld: Client) -> None:
    put = recalld.document_put(
        path="memory/2026-11-20.md", content="# 20 Nov\n\n- Met Ana for lunch\n- Sintra trip\n"
    )
    assert put.chunks >= 1 and not put.unchanged
    assert recalld.document_put(
        path="memory/2026-11-20.md", content="# 20 Nov\n\n- Met Ana for lunch\n- Sintra trip\n"
    ).unchanged
    part = recalld.document_get("memory/2026-11-20.md", from_line=3, lines=1)
    assert (part.from_line, part.to, part.content) == (3, 3, "- Met Ana for lunch")
    assert [d.path for d in recalld.document_list().documents] == ["memory/2026-11-20.md"]
    hits = recalld.memory_search(query="Sintra", types=["document"])
    assert hits.results[0].path == "memory/2026-11-20.md"
    recalld.document_delete("memory/2026-11-20.md")
    assert recalld.document_list().documents == []

    source = "def helper():\n    return 1\n\n\ndef caller():\n    return helper()\n"
    indexed = recalld.code_index_files("tools", [{"path": "tools/util.py", "content": source}])
    assert (indexed.repository, indexed.files, indexed.unsupported) == ("tools", 1, [])
    assert [f.path for f in recalld.code_list_files("tools").files] == ["tools/util.py"]
    answer = recalld.code_research(kind="callers", symbol="helper", repository="tools")
    assert [item.symbol for item in answer.items] == ["caller"]
    recalld.code_delete_file("tools", "tools/util.py")
    assert recalld.code_list_files("tools").files == []

    with Client(base_url, tenant.admin) as admin:
        stored = admin.scope_settings_put("health", {"fusion": "rrf", "half_life_days": 30})
        assert (stored.fusion, stored.half_life_days) == ("rrf", 30)
        toml = '[butler]\nname = "health"\n\n[butler.memory.retrieval]\nhalf_life_days = 10\n'
        assert admin.scope_settings_put("health", toml).half_life_days == 10
        assert recalld.scope_settings_get("health").half_life_days == 10


def test_search_filters(recalld: Client) -> None:
    recalld.memory_store_fact(content="Quarterly report due Friday", tags=["work"])
    recalld.memory_store_fact(content="Quarterly dentist visit", tags=["health"])
    only_work = recalld.memory_search(query="quarterly", filters=SearchFilters(tags=["work"]))
    assert [r.content for r in only_work.results] == ["Quarterly report due Friday"]


async def test_async_client(base_url: str, tenant: TenantKeys, make_tenant: TenantFactory) -> None:
    other = await make_tenant("client-other")
    async with (
        AsyncClient(base_url, tenant.writer) as recalld,
        AsyncClient(base_url, other.writer) as stranger,
    ):
        fact = await recalld.memory_store_fact(content="The user's bike is a blue Brompton", subject="bike")
        again = await recalld.memory_store_fact(content="the user's bike is a blue brompton", subject="bike")
        assert (again.id, again.duplicate_of) == (fact.id, fact.id)
        assert [m.id for m in (await recalld.memory_history(fact.id)).items] == [fact.id]
        found = await recalld.memory_search(query="Brompton bike", limit=3)
        assert [r.id for r in found.results] == [fact.id]
        assert (await stranger.memory_search(query="Brompton bike")).results == []
        recalled = await recalld.memory_recall(topic="bike")
        assert recalled.results[0].id == fact.id
        assert [m.id async for m in recalld.iter_memories("fact", page_size=1)] == [fact.id]
        with pytest.raises(NotFoundError):
            await stranger.memory_get(fact.id)
        await recalld.memory_forget(fact.id)
        assert (await recalld.memory_list("fact")).items == []


def test_unknown_response_fields_are_kept() -> None:
    # Fields a newer server adds (e.g. `duplicate_of`) must never break an older client.
    memory = MemoryOut.model_validate(
        {
            "id": str(uuid.uuid4()),
            "type": "fact",
            "content": "x",
            "importance": 5,
            "scope": "global",
            "tags": [],
            "metadata": {},
            "created_at": "2026-11-20T09:30:00Z",
            "reference_count": 0,
            "last_referenced_at": None,
            "duplicate_of": None,
            "contradicts": [],
        }
    )
    assert memory.model_extra == {"duplicate_of": None, "contradicts": []}
