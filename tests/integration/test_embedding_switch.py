"""`recalld embeddings switch`: re-embedding every memory with another model while serving, then one cut-over.

The new model is tests/embedding_stub.py, a labelled TEST DOUBLE of an OpenAI-compatible endpoint
(deterministic vectors, not about semantics); the old one is the real local MiniLM, or the stub
at another dimension where the test is about resuming, not about models.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import asyncpg
import httpx
import numpy as np
import psutil
import pytest

from app.auth import mint_key
from app.infra.config import Settings
from app.infra.db import connect, resolve_dsn
from app.main import create_app
from app.repositories import embedding_switch as switch_repo
from app.repositories import tenants as tenant_repo
from app.services import embedding_switch as switching
from app.services.embedding_switch_worker import SwitchWorker
from app.state import ServiceState
from tests.embedding_stub import StubState, embedding_stub, stub_vector
from tests.support import ROOT, failing_first, free_port, running, wait_ready

FACTS = 20
DOCUMENT = "# Birds\n\nThe heron waits at the lake shore.\n\n## Ferries\n\nThe ferry leaves at seven.\n"


@pytest.fixture
def fresh_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="sw-", dir="/tmp"))
    yield path
    pid_file = path / "pg" / "postmaster.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text().split()[0])
        if psutil.pid_exists(pid):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def _stub_settings(data_dir: Path, url: str, dim: int) -> Settings:
    return Settings(
        data_dir=data_dir,
        database_url=None,
        embedding_provider="openai",
        embedding_model=f"stub-{dim}",
        embedding_dim=dim,
        openai_base_url=url,
        openai_api_key="sk-test",
        pool_min_size=1,
        pool_max_size=3,
        embedding_switch_batch_size=4,
        embedding_switch_requests_per_second=2,
    )


class Stubs(NamedTuple):
    """The old model's stand-in (384 dimensions), the new one's (768), and settings serving the old."""

    old_url: str
    new_url: str
    new: StubState
    settings: Settings


@pytest.fixture
def stubs(fresh_dir: Path) -> Iterator[Stubs]:
    with embedding_stub(384) as (old_url, _), embedding_stub(768) as (new_url, new):
        yield Stubs(old_url, new_url, new, _stub_settings(fresh_dir, old_url, 384))


async def _writer_key(owner: asyncpg.Connection) -> str:
    tenant = await tenant_repo.create_tenant(owner, name=f"sw-{uuid.uuid4().hex[:8]}")
    key = mint_key()
    await tenant_repo.insert_api_key(
        owner, tenant_id=tenant.id, prefix=key.prefix, key_hash=key.key_hash, role="writer", operator=False
    )
    return key.plain


async def _every_tenant(owner: asyncpg.Connection) -> None:
    await owner.execute(
        "SELECT set_config('recalld.tenant_ids', coalesce(string_agg(id::text, ','), ''), false) FROM tenant"
    )


async def _columns(owner: asyncpg.Connection) -> dict[str, str]:
    rows = await owner.fetch(
        "SELECT attrelid::regclass::text AS t, attname, format_type(atttypid, atttypmod) AS type "
        "FROM pg_attribute WHERE attrelid IN ('memory'::regclass, 'memory_vector'::regclass) "
        "AND attname LIKE 'embedding%' AND NOT attisdropped"
    )
    return {f"{r['t']}.{r['attname']}": r["type"] for r in rows}


def _cosine(a: Any, b: list[float]) -> float:
    x, y = np.asarray(a.to_numpy() if hasattr(a, "to_numpy") else a, dtype=np.float64), np.asarray(b)
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


async def _wait(predicate: Any, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


@dataclass(frozen=True)
class _Service:
    """A service in this process (over ASGI), the schema owner's connection, and a writer's client."""

    settings: Settings
    state: ServiceState
    owner: asyncpg.Connection
    http: httpx.AsyncClient
    headers: dict[str, str]

    async def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        """POST as the writer."""
        return await self.http.post(path, json=body, headers=self.headers)

    async def facts(self, texts: Iterable[str]) -> None:
        """Store each text as a fact (201 each)."""
        for text in texts:
            r = await self.post("/v1/facts", {"content": text})
            assert r.status_code == 201, r.text

    async def start_stub_switch(
        self, url: str, *, dim: int | None = 768, model: str = "stub-768"
    ) -> dict[str, Any]:
        """Start a switch to the stand-in's model at url (dim None: asked of the endpoint)."""
        return await switching.start_switch(
            self.owner,
            self.settings,
            provider_name="openai",
            model=model,
            dim=dim,
            base_url=url,
            api_key_file=None,
        )

    def serves(self, dim: int) -> bool:
        """Whether the service embeds with a model of dim dimensions."""
        return self.state.embedder is not None and self.state.embedder.identity.dim == dim

    async def switched(self, seconds: float = 120.0) -> None:
        """Until the cut-over to the 768-dimension model."""
        await _wait(lambda: self.serves(768), seconds)


@asynccontextmanager
async def _service(settings: Settings) -> AsyncIterator[_Service]:
    async with running(create_app(settings)) as app:
        owner = await connect(await resolve_dsn(settings))
        try:
            headers = {"Authorization": f"Bearer {await _writer_key(owner)}"}
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                yield _Service(settings, app.state.service, owner, http, headers)
        finally:
            await owner.close()


async def test_a_switch_from_the_local_model_to_768_under_writes_and_searches(
    fresh_dir: Path, stubs: Stubs, settings: Settings
) -> None:
    # The local model's ONNX export of the session's service, instead of exporting it again here.
    (fresh_dir / "models").symlink_to(settings.resolved_data_dir / "models")
    local = Settings(
        data_dir=fresh_dir,
        database_url=None,
        embedding_provider="local",
        pool_min_size=1,
        pool_max_size=4,
        embedding_switch_batch_size=8,
        embedding_switch_requests_per_second=4,  # paced: the switch takes a few seconds
        rate_limit_per_second=0,  # three clients on one key; not about the rate limit
    )
    async with _service(local) as service:
        state, owner, http = service.state, service.owner, service.http
        facts = [f"The heron number {i} nests by the lake" for i in range(40)]
        await service.facts(facts)
        for turn in ("We booked the ferry", "It leaves at seven", "Bring the tickets"):
            episode = {"content": turn, "butler": "concierge", "session_id": "s1"}
            assert (await service.post("/v1/episodes", episode)).status_code == 201
        document = {"path": "notes/birds.md", "content": DOCUMENT}
        assert (await http.put("/v1/documents", json=document, headers=service.headers)).status_code == 200
        code = {"repository": "app", "files": [{"path": "a.py", "content": "def heron():\n    return 1\n"}]}
        assert (await http.put("/v1/code/files", json=code, headers=service.headers)).status_code == 200

        record = await service.start_stub_switch(stubs.new_url, dim=None)
        assert record["target"] == {"provider": "openai", "model": "stub-768", "dim": 768}
        assert (await _columns(owner))["memory.embedding_next"] == "vector(768)"

        written: list[str] = []
        statuses: list[int] = []
        progress: list[dict[str, Any]] = []
        stop = asyncio.Event()

        async def writer() -> None:
            n = 0
            while not stop.is_set():
                r = await service.post(
                    "/v1/facts", {"content": f"Written during the switch {n} about ferries"}
                )
                statuses.append(r.status_code)
                if r.status_code == 201:
                    written.append(r.json()["id"])
                n += 1
                await asyncio.sleep(0.05)

        async def searcher(mode: str) -> None:
            while not stop.is_set():
                r = await service.post("/v1/search", {"query": "heron lake", "mode": mode})
                statuses.append(r.status_code)
                ready = (await http.get("/readyz")).json()
                if "embedding_switch" in ready["checks"]:
                    progress.append(ready["checks"]["embedding_switch"])
                await asyncio.sleep(0.02)

        tasks = [asyncio.create_task(t) for t in (writer(), searcher("hybrid"), searcher("semantic"))]
        # A write while the switch runs is embedded with both models, in its own request.
        await _wait(lambda: state.embedder is not None and state.embedder.switch_target is not None)
        dual = "Stored with both models at once"
        r = await service.post("/v1/facts", {"content": dual})
        assert r.status_code == 201
        await _every_tenant(owner)
        if service.serves(384):
            twin = await owner.fetchval(
                "SELECT embedding_next FROM memory WHERE id = $1", uuid.UUID(r.json()["id"])
            )
            assert twin is not None and _cosine(twin, stub_vector(dual, 768)) > 0.999
        # A few seconds on an idle machine; minutes on a 2-core one shared with test suites.
        await service.switched(300)
        await asyncio.sleep(0.5)  # writes and searches go on with the new model
        stop.set()
        await asyncio.gather(*tasks)

        assert statuses and set(statuses) <= {200, 201}, sorted(set(statuses))
        assert progress, "/readyz never showed the switch's progress"
        last = progress[-1]
        assert last["target"]["dim"] == 768 and 0 < last["done"] <= last["total"]
        assert {"rate_per_second", "eta_seconds", "state"} <= set(last)

        assert (await _columns(owner)) == {
            "memory.embedding": "vector(768)",
            "memory_vector.embedding": "vector(768)",
        }
        recorded = await owner.fetchval("SELECT value FROM system_config WHERE key = 'embedding'")
        assert recorded == {"provider": "openai", "model": "stub-768", "dim": 768}
        assert await owner.fetchval("SELECT value FROM system_config WHERE key = 'embedding_switch'") is None
        counts = await owner.fetchrow(
            "SELECT count(*) AS n, count(embedding) AS e, (SELECT count(*) FROM memory_vector) AS v FROM memory"
        )
        assert counts["n"] == counts["e"] == counts["v"]
        # Nothing written was lost, and every fact holds the new model's vector of its text.
        stored = await owner.fetch("SELECT id, content, embedding FROM memory WHERE kind = 'fact'")
        assert {str(r["id"]) for r in stored} >= set(written)
        assert len(stored) == len(facts) + len(written) + 1
        assert all(_cosine(r["embedding"], stub_vector(r["content"], 768)) > 0.999 for r in stored)
        # Code is embedded with its header, as its upload did: not its bare content.
        code_vector = await owner.fetchval("SELECT embedding FROM memory WHERE kind = 'code'")
        assert _cosine(code_vector, stub_vector("def heron():\n    return 1\n", 768)) < 0.999

        found = await service.post("/v1/search", {"query": "heron nests", "mode": "semantic"})
        assert found.status_code == 200 and found.json()["results"]
        assert (await http.get("/readyz")).json()["checks"]["embedder"]["dim"] == 768
        assert "embedding_switch" not in (await http.get("/readyz")).json()["checks"]
    assert stubs.new.requests


async def test_abort_returns_to_the_old_model_with_nothing_lost(stubs: Stubs) -> None:
    async with _service(stubs.settings) as service:
        state, owner = service.state, service.owner
        with pytest.raises(switching.SwitchError, match="no embedding switch is running"):
            await switching.abort_switch(owner)
        await service.facts(f"Ferry {i} leaves" for i in range(30))
        await _every_tenant(owner)
        before = {
            r["id"]: r["embedding"].to_list() for r in await owner.fetch("SELECT id, embedding FROM memory")
        }
        with pytest.raises(switching.SwitchError, match="already are of"):
            await switching.start_switch(
                owner,
                stubs.settings,
                provider_name="openai",
                model="stub-384",
                dim=384,
                base_url=stubs.old_url,
                api_key_file=None,
            )
        await service.start_stub_switch(stubs.new_url)
        with pytest.raises(switching.SwitchError, match="is running"):
            await switching.start_switch(
                owner,
                stubs.settings,
                provider_name="local",
                model=None,
                dim=None,
                base_url=None,
                api_key_file=None,
            )
        await _wait(lambda: state.embedding_switch is not None and state.embedding_switch.get("done", 0) > 0)
        await service.facts(["Written before the abort"])
        record = await switching.abort_switch(owner)
        assert record["target"]["dim"] == 768
        await service.facts(["Written after the abort"])
        found = await service.post("/v1/search", {"query": "ferry leaves", "mode": "semantic"})
        assert found.status_code == 200 and found.json()["results"]

        assert service.serves(384)
        assert state.embedder is not None and state.embedder.switch_target is None
        assert state.embedding_switch is None
        assert (await _columns(owner)) == {
            "memory.embedding": "vector(384)",
            "memory_vector.embedding": "vector(384)",
        }
        assert await owner.fetchval("SELECT value FROM system_config WHERE key = 'embedding_switch'") is None
        assert await owner.fetchval("SELECT value FROM system_config WHERE key = 'embedding'") == {
            "provider": "openai",
            "model": "stub-384",
            "dim": 384,
        }
        await _every_tenant(owner)
        now = {
            r["id"]: r["embedding"].to_list() for r in await owner.fetch("SELECT id, embedding FROM memory")
        }
        assert {k: now[k] for k in before} == before
        assert len(now) == len(before) + 2
        assert await owner.fetchval("SELECT count(*) FROM memory_vector") == len(now)
        # The worker stopped asking the new model.
        asked = len(stubs.new.requests)
        await asyncio.sleep(2.5)
        assert len(stubs.new.requests) == asked


def _env(data_dir: Path, url: str, dim: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(
        RECALLD_DATA_DIR=str(data_dir),
        RECALLD_EMBEDDING_PROVIDER="openai",
        RECALLD_EMBEDDING_MODEL=f"stub-{dim}",
        RECALLD_EMBEDDING_DIM=str(dim),
        RECALLD_OPENAI_BASE_URL=url,
        RECALLD_OPENAI_API_KEY="sk-test",
        # One memory per request, one request per second: the switch takes FACTS seconds.
        RECALLD_EMBEDDING_SWITCH_BATCH_SIZE="1",
        RECALLD_EMBEDDING_SWITCH_REQUESTS_PER_SECOND="1",
        RECALLD_POOL_MIN_SIZE="1",
        HF_HUB_OFFLINE="1",
    )
    return env


def _recalld(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _serve(env: dict[str, str], port: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _done(status: str) -> tuple[int, int] | None:
    found = re.search(r"^switch: .*: (\d+)/(\d+) memories", status, re.MULTILINE)
    return (int(found[1]), int(found[2])) if found else None


def _readyz(base: str) -> dict[str, Any]:
    checks: dict[str, Any] = httpx.get(f"{base}/readyz", timeout=5).json()["checks"]
    return checks


def test_a_sigkill_in_the_middle_of_a_switch_resumes_and_completes(fresh_dir: Path, stubs: Stubs) -> None:
    old_url, new_url, new_stub = stubs.old_url, stubs.new_url, stubs.new
    env = _env(fresh_dir, old_url, 384)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = _serve(env, port)
    try:
        wait_ready(port, server)
        headers = {"Authorization": f"Bearer {(fresh_dir / 'admin.key').read_text().strip()}"}
        for i in range(FACTS):
            r = httpx.post(f"{base}/v1/facts", json={"content": f"Lake fact {i}"}, headers=headers)
            assert r.status_code == 201
        switched = _recalld(
            env,
            "embeddings",
            "switch",
            "--provider",
            "openai",
            "--model",
            "stub-768",
            "--base-url",
            new_url,
        )
        assert switched.returncode == 0, switched.stderr
        assert "768 dimensions" in switched.stderr
        # Progress in /readyz, then in the CLI: done/total, rate and ETA.
        deadline = time.monotonic() + 60
        while (_readyz(base).get("embedding_switch") or {}).get("done", 0) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        progress = _readyz(base)["embedding_switch"]
        assert progress["total"] == FACTS and progress["target"]["dim"] == 768
        status = _recalld(env, "embeddings", "status").stdout
        done = _done(status)
        assert done is not None and 0 < done[0] < done[1] == FACTS, status
        assert re.search(r"switch rate: [\d.]+ memories/s, ETA \d+m\d\ds", status), status

        # Crash the service and PostgreSQL in the middle of the switch.
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        os.kill(int((fresh_dir / "pg" / "postmaster.pid").read_text().split()[0]), signal.SIGKILL)
        time.sleep(switching.WORKER_STALE_SECONDS)  # until its last report is too old to be a live worker's
        status = _recalld(env, "embeddings", "status").stdout
        assert "switch worker: not running" in status, status
        crashed_at = _done(status)
        assert crashed_at is not None and 0 < crashed_at[0] < FACTS, status

        server = _serve(env, port)
        wait_ready(port, server)
        deadline = time.monotonic() + 90
        while _readyz(base)["embedder"]["dim"] != 768:
            assert time.monotonic() < deadline
            time.sleep(0.3)
        status = _recalld(env, "embeddings", "status").stdout
        assert "model: openai/stub-768" in status and "columns: vector(768)" in status, status
        assert f"memories: {FACTS}, with a vector: {FACTS}" in status and "switch:" not in status, status
        # The resumed switch embedded only what the crash left undone (plus a batch in flight).
        asked = sum(len(r["input"]) for r in new_stub.requests if isinstance(r["input"], list))
        assert asked <= FACTS + 2
        found = httpx.post(
            f"{base}/v1/search", json={"query": "Lake fact 7", "mode": "semantic"}, headers=headers
        )
        assert found.status_code == 200 and found.json()["results"]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)

    # The old configuration no longer matches: one line naming the settings and the command.
    refused = _recalld(env, "serve", "--port", str(port))
    assert refused.returncode != 0
    lines = [line for line in (refused.stdout + refused.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "RECALLD_EMBEDDING_MODEL=stub-768" in lines[0]
    assert "recalld embeddings switch --provider openai --model stub-384 --dim 384" in lines[0]
    assert "listening" not in lines[0]


async def test_an_outage_of_the_new_models_endpoint_pauses_the_switch_and_refuses_no_write(
    stubs: Stubs,
) -> None:
    stubs.new.failure_status, stubs.new.failures = 429, -1
    settings = stubs.settings.model_copy(
        update={"embedding_max_retries": 0, "embedding_switch_requests_per_second": 0}
    )
    async with _service(settings) as service:
        state = service.state
        await service.facts(f"Heron {i}" for i in range(6))
        await service.start_stub_switch(stubs.new_url)
        await _wait(lambda: str((state.embedding_switch or {}).get("state", "")).startswith("waiting"))
        assert "429" in state.embedding_switch["state"]  # type: ignore[index]
        # The old model still answers: writes and searches go on while the new one is down.
        await service.facts(["Written during the outage"])
        found = await service.post("/v1/search", {"query": "heron"})
        assert found.status_code == 200 and found.json()["results"]
        assert service.serves(384)
        with stubs.new.lock:
            stubs.new.failures = 0  # the endpoint is back
        await service.switched()
        await _every_tenant(service.owner)
        assert (
            await service.owner.fetchval("SELECT count(*) FROM memory WHERE vector_dims(embedding) = 768")
            == 7
        )


async def _switch_under_unpaused_load(settings: Settings, new_url: str) -> None:
    """Switch to stub-768 while a writer and a searcher send request after request with no pause.

    Every search returns (and counts a reference on) the memories the worker is embedding. The
    per-key rate limit is off: two clients without pause exceed it, and this is not about it.
    """
    async with _service(settings.model_copy(update={"rate_limit_per_second": 0})) as service:
        await service.facts(f"Heron {i} at the lake" for i in range(8))
        await service.start_stub_switch(new_url)
        written: list[str] = []
        statuses: list[int] = []
        refused: list[str] = []
        stop = asyncio.Event()

        async def writer() -> None:
            n = 0
            while not stop.is_set():
                text = f"Heron note {n} at the lake"
                r = await service.post("/v1/facts", {"content": text})
                if r.status_code == 503 and service.serves(768):
                    # After the cut-over the flaky new endpoint is the service's own model:
                    # a write it fails answers 503 and stores nothing (checked below).
                    assert r.json()["error"]["code"] == "embedding_unavailable"
                    refused.append(text)
                    # The next write is another text: sent again, this one would be stored (the
                    # stub refuses a text once), and "refused stores nothing" could not be checked.
                    n += 1
                    continue
                statuses.append(r.status_code)
                if r.status_code == 201:
                    written.append(r.json()["id"])
                n += 1

        async def searcher() -> None:
            while not stop.is_set():
                r = await service.post("/v1/search", {"query": "heron lake", "mode": "semantic"})
                statuses.append(r.status_code)

        tasks = [asyncio.create_task(writer()), asyncio.create_task(searcher())]
        try:
            await service.switched(90)
        finally:
            stop.set()
            await asyncio.gather(*tasks)
        assert statuses and set(statuses) <= {200, 201}, sorted(set(statuses))
        owner = service.owner
        await _every_tenant(owner)
        stored = await owner.fetch("SELECT id, content, embedding FROM memory")
        assert {str(r["id"]) for r in stored} >= set(written) and len(stored) == 8 + len(written)
        assert not {r["content"] for r in stored} & set(refused)
        assert all(_cosine(r["embedding"], stub_vector(r["content"], 768)) > 0.999 for r in stored)
        assert await owner.fetchval("SELECT count(*) FROM memory_vector") == len(stored)


async def test_searches_that_keep_returning_the_memories_being_embedded_do_not_stall_the_switch(
    stubs: Stubs,
) -> None:
    # Each search counts a reference on the rows the worker is embedding (an UPDATE of each): the
    # worker must still store their new vectors (their text is unchanged).
    await _switch_under_unpaused_load(stubs.settings, stubs.new_url)


async def test_writes_the_new_model_failed_do_not_hold_the_cut_over_off(stubs: Stubs) -> None:
    # The new model's endpoint refuses each text the first time (every write's own new-model
    # vector fails, so each write leaves a memory for the worker), and serves it on the next try.
    # Under a writer with no pause one such memory is always being written when the cut-over
    # closes the gate: the cut-over embeds it under its lock instead of giving way.
    stubs.new.failure_status, stubs.new.fail_unseen = 503, True
    settings = stubs.settings.model_copy(
        update={"embedding_max_retries": 0, "embedding_switch_requests_per_second": 0}
    )
    await _switch_under_unpaused_load(settings, stubs.new_url)


async def test_status_says_the_worker_runs_while_a_slow_request_holds_its_batch(
    fresh_dir: Path, stubs: Stubs
) -> None:
    # The new model's endpoint (the stub) holds the first batch's request until the test lets it
    # go: longer than a batch ever took in the other tests, as a slow provider or a loaded machine does.
    stubs.new.gate.clear()
    settings = stubs.settings.model_copy(
        update={"embedding_timeout_seconds": 600, "embedding_switch_requests_per_second": 0}
    )
    try:
        async with _service(settings) as service:
            await service.facts(f"Heron {i}" for i in range(6))
            await service.start_stub_switch(stubs.new_url)
            await _wait(lambda: bool(stubs.new.requests))
            # Held longer than a heartbeat may be old: a worker that beat only between batches
            # looked dead by now.
            await asyncio.sleep(switching.WORKER_STALE_SECONDS + 1)
            assert len(stubs.new.requests) == 1
            # The CLI says the worker runs, with its progress, not "not running".
            env = _env(fresh_dir, stubs.old_url, 384)
            status = (await asyncio.to_thread(_recalld, env, "embeddings", "status")).stdout
            assert "switch: to openai/stub-768" in status, status
            assert "switch worker: not running" not in status and "switch rate:" in status, status
            stubs.new.gate.set()
            await service.switched()
    finally:
        stubs.new.gate.set()


async def test_a_switch_keeps_a_few_requests_in_flight_to_an_api_and_no_more(stubs: Stubs) -> None:
    # One request at a time, the endpoint's latency bounded the switch's rate: the stand-in holds
    # every request until the test lets them go, and counts how many came meanwhile.
    stubs.new.gate.clear()
    settings = stubs.settings.model_copy(
        update={
            "embedding_switch_batch_size": 12,
            "embedding_batch_size": 2,
            "embedding_switch_requests_in_flight": 3,
            "embedding_switch_requests_per_second": 0,
            "embedding_timeout_seconds": 600,
        }
    )
    try:
        async with _service(settings) as service:
            await service.facts(f"Heron {i} by the lake" for i in range(12))
            await service.start_stub_switch(stubs.new_url)
            await _wait(lambda: len(stubs.new.requests) >= 3)
            await asyncio.sleep(1.0)  # time enough for a fourth, were one sent
            assert len(stubs.new.requests) == 3
            stubs.new.gate.set()
            await service.switched()
            await _every_tenant(service.owner)
            stored = await service.owner.fetch("SELECT content, embedding FROM memory")
            assert len(stored) == 12
            assert all(_cosine(r["embedding"], stub_vector(r["content"], 768)) > 0.999 for r in stored)
        assert all(len(r["input"]) <= 2 for r in stubs.new.requests)
    finally:
        stubs.new.gate.set()


def _idle_service_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the service's own switch worker idle: a test's worker attaches and detaches step by step."""

    async def idle(self: SwitchWorker) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(SwitchWorker, "run_forever", idle)


async def _abort_unseen(owner: asyncpg.Connection) -> None:
    """What abort_switch does when it sees no live worker: drop the column and the record."""
    async with owner.transaction():
        await switch_repo.drop_pending_column(owner)
        await switch_repo.delete_switch_record(owner)


async def test_writes_after_an_abort_dropped_the_column_of_a_model_still_lent_to_them_are_stored(
    stubs: Stubs, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race, step by step: an abort that sees no heartbeat drops the pending column and the
    # record while this process's worker, having read the record just before, lends the new model
    # to writes. The service's own worker is kept idle (it would attach and detach on its own
    # schedule); the test does what it does, with a worker of its own.
    _idle_service_worker(monkeypatch)
    async with _service(stubs.settings) as service:
        await service.facts(["The heron waits at the lake shore"])
        record = await service.start_stub_switch(stubs.new_url)
        worker = SwitchWorker(await resolve_dsn(service.settings), service.state)
        try:
            await _write_after_the_abort(service, worker, record, stubs.new)
        finally:
            worker._detach()


async def _write_after_the_abort(
    service: _Service, worker: SwitchWorker, record: dict[str, Any], new: StubState
) -> None:
    state, owner, http = service.state, service.owner, service.http
    assert await worker._attach(owner, record) is not None
    assert state.embedder is not None and state.embedder.switch_target is not None
    await _abort_unseen(owner)

    asked = len(new.requests)
    r = await service.post("/v1/facts", {"content": "The ferry leaves the lake at seven"})
    assert r.status_code == 201, r.text
    assert len(new.requests) > asked  # embedded with the lent model too: the race was run
    document = {"path": "notes/birds.md", "content": DOCUMENT}
    put = await http.put("/v1/documents", json=document, headers=service.headers)
    assert put.status_code == 200, put.text
    code = {"repository": "app", "files": [{"path": "a.py", "content": "def heron():\n    return 1\n"}]}
    put = await http.put("/v1/code/files", json=code, headers=service.headers)
    assert put.status_code == 200, put.text

    found = await service.post("/v1/search", {"query": "ferry leaves the lake", "mode": "semantic"})
    assert found.status_code == 200
    assert r.json()["id"] in [hit["id"] for hit in found.json()["results"]]
    await _every_tenant(owner)
    counts = await owner.fetch("SELECT kind, count(*) AS n, count(embedding) AS e FROM memory GROUP BY kind")
    assert {c["kind"] for c in counts} == {"fact", "document", "code"}
    assert all(c["n"] == c["e"] for c in counts), counts
    vectors = await owner.fetchval("SELECT count(*) FROM memory_vector")
    assert vectors == sum(c["n"] for c in counts)
    assert (await _columns(owner)) == {
        "memory.embedding": "vector(384)",
        "memory_vector.embedding": "vector(384)",
    }
    # The worker's next poll stops lending the new model.
    await worker.step(owner)
    assert state.embedder.switch_target is None


async def test_a_model_still_lent_by_an_aborted_switch_stores_nothing_in_the_next_switchs_column(
    stubs: Stubs, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race, step by step: an abort that sees no heartbeat drops switch 1's column and record,
    # and a new switch starts before this process's worker polls again, so writes still embed with
    # switch 1's model. Its vectors must not go into switch 2's column: of another model with the
    # same dimension they were stored silently and went live at the cut-over; of another
    # dimension the insert failed (500). The stand-in serves switch 1's model.
    _idle_service_worker(monkeypatch)
    async with _service(stubs.settings) as service:
        owner = service.owner
        first = await service.start_stub_switch(stubs.new_url)
        worker = SwitchWorker(await resolve_dsn(service.settings), service.state)
        try:
            assert await worker._attach(owner, first) is not None
            for model, dim in (("other-768", 768), ("other-512", 512)):
                await _abort_unseen(owner)
                await service.start_stub_switch(stubs.new_url, dim=dim, model=model)
                asked = len(stubs.new.requests)
                r = await service.post("/v1/facts", {"content": f"The ferry for {model} leaves at seven"})
                assert r.status_code == 201, r.text
                assert len(stubs.new.requests) > asked  # embedded with switch 1's model: the race was run
                document = {"path": f"notes/{model}.md", "content": DOCUMENT}
                put = await service.http.put("/v1/documents", json=document, headers=service.headers)
                assert put.status_code == 200, put.text
                await _every_tenant(owner)
                assert (await _columns(owner))["memory.embedding_next"] == f"vector({dim})"
                # Every memory waits for switch 2's worker to embed it; none holds switch 1's vector.
                counts = await owner.fetchrow(
                    "SELECT count(*) AS n, count(embedding) AS e, count(embedding_next) AS pending FROM memory"
                )
                assert counts["n"] == counts["e"] > 0 and counts["pending"] == 0, dict(counts)
        finally:
            worker._detach()


async def test_a_worker_still_running_an_aborted_switch_neither_fills_nor_cuts_over_the_next_one(
    stubs: Stubs, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same race in the worker's own steps: it read switch 1's record, then the abort and a new
    # switch (same dimension, another model) came before its next read. Its cut-over and its batch
    # must not act on switch 2 with switch 1's model.
    _idle_service_worker(monkeypatch)
    async with _service(stubs.settings) as service:
        owner = service.owner
        first = await service.start_stub_switch(stubs.new_url)
        worker = SwitchWorker(await resolve_dsn(service.settings), service.state)
        try:
            run = await worker._attach(owner, first)
            assert run is not None
            await _abort_unseen(owner)
            second = await service.start_stub_switch(stubs.new_url, model="other-768")
            # No memory is pending: the cut-over would have recorded switch 1's model and dropped switch 2.
            assert await worker._cut_over(owner, run) is False
            assert (await switch_repo.switch_record(owner) or {}).get("id") == second["id"]
            assert service.serves(384)

            await service.facts(["The heron waits at the lake shore", "The ferry leaves at seven"])
            asked = len(stubs.new.requests)
            assert await worker._batch(owner, run)
            assert len(stubs.new.requests) > asked  # embedded with switch 1's model: the race was run
            await _every_tenant(owner)
            counts = await owner.fetchrow(
                "SELECT count(*) AS n, count(embedding_next) AS pending FROM memory"
            )
            assert counts["n"] == 2 and counts["pending"] == 0, dict(counts)
        finally:
            worker._detach()


async def test_writes_still_embedding_with_a_new_model_the_worker_withdraws_are_stored(
    stubs: Stubs, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker closes the new model it withdraws (the switch ended, was aborted, or the worker
    # failed) without waiting for the writes still embedding with it: one of them is in the
    # endpoint (held there by the stand-in), the next queued behind it in the model's lane. The
    # service's own worker is kept idle; the test's worker attaches and withdraws.
    _idle_service_worker(monkeypatch)
    async with _service(stubs.settings) as service:
        record = await service.start_stub_switch(stubs.new_url)
        worker = SwitchWorker(await resolve_dsn(service.settings), service.state)
        try:
            run = await worker._attach(service.owner, record)
            assert run is not None
            stubs.new.gate.clear()
            asked = len(stubs.new.requests)
            first = asyncio.create_task(service.post("/v1/facts", {"content": "The first heron"}))
            await _wait(lambda: len(stubs.new.requests) > asked)
            second = asyncio.create_task(service.post("/v1/facts", {"content": "The second heron"}))
            # The second write's texts wait in the new model's (one-thread) lane behind the first's.
            lane = run.target._document_executor
            await _wait(lambda: lane._work_queue.qsize() > 0)
            worker._detach()
            stubs.new.gate.set()
            answers = [await first, await second]
        finally:
            stubs.new.gate.set()
            worker._detach()
        assert [a.status_code for a in answers] == [201, 201], [a.text for a in answers]
        await _every_tenant(service.owner)
        stored = await service.owner.fetch("SELECT content, embedding FROM memory")
        assert sorted(r["content"] for r in stored) == ["The first heron", "The second heron"]
        assert all(_cosine(r["embedding"], stub_vector(r["content"], 384)) > 0.999 for r in stored)


async def test_a_worker_that_failed_unexpectedly_is_shown_stopped_until_it_tries_again(
    fresh_dir: Path, stubs: Stubs, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with _service(stubs.settings) as service:
        state, owner = service.state, service.owner
        await service.facts(f"Heron {i}" for i in range(6))
        # Not the provider's failure (the switch waits for that, running): something unexpected,
        # once. The worker then pauses MAX_BACKOFF_SECONDS (a minute) before it tries again.
        failing = failing_first(switch_repo.pending_rows, RuntimeError("boom"), 1)
        monkeypatch.setattr(switch_repo, "pending_rows", failing)
        await service.start_stub_switch(stubs.new_url)
        await _wait(lambda: "boom" in str((state.embedding_switch or {}).get("state")), 30)
        assert state.embedder is not None and state.embedder.switch_target is None

        # Sooner than a heartbeat grows stale: the failure is recorded, and heartbeats stop.
        deadline = time.monotonic() + switching.WORKER_STALE_SECONDS - 5
        while (running_switch := await switching.switch_status(owner)) and running_switch.worker_alive:
            assert time.monotonic() < deadline, "status still says the failed worker runs"
            await asyncio.sleep(0.2)
        env = _env(fresh_dir, stubs.old_url, 384)
        status = (await asyncio.to_thread(_recalld, env, "embeddings", "status")).stdout
        assert "switch worker: not running" in status, status
        assert "switch worker's last state: failed (RuntimeError: boom)" in status, status
        # An abort does it itself, instead of waiting on the paused worker (and giving up).
        await switching.abort_switch(owner)
        assert await switching.switch_status(owner) is None
        assert (await _columns(owner)) == {
            "memory.embedding": "vector(384)",
            "memory_vector.embedding": "vector(384)",
        }
