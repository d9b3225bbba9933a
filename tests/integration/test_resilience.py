"""A database crash, a bug or a crowd: the server answers, recovers on its own, and loses nothing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support import ROOT, free_port


@dataclass(frozen=True, slots=True)
class RunningServer:
    """A `recalld serve` process with its own embedded PostgreSQL."""

    url: str
    key: str
    pgdata: Path


@pytest.fixture
def own_data_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rr-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def running_server(own_data_dir: Path) -> AsyncIterator[RunningServer]:
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "RECALLD_DATA_DIR": str(own_data_dir),
        # Not about semantics: keyword-only keeps the server start fast.
        "RECALLD_EMBEDDING_PROVIDER": "none",
        "RECALLD_LOG_LEVEL": "warning",
        # The writers below are one key sending as fast as they can; 429s are not what this measures.
        "RECALLD_RATE_LIMIT_PER_SECOND": "0",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "serve", "--port", str(port), cwd=ROOT, env=env
    )
    url = f"http://127.0.0.1:{port}"
    pgdata = own_data_dir / "pg"
    try:
        async with httpx.AsyncClient(base_url=url) as http:
            deadline = time.monotonic() + 120
            while True:
                assert process.returncode is None, "recalld serve exited during startup"
                assert time.monotonic() < deadline, "recalld serve did not become ready"
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get("/readyz")).status_code == 200:
                        break
                await asyncio.sleep(0.3)
        key = (own_data_dir / "admin.key").read_text().strip()
        yield RunningServer(url=url, key=key, pgdata=pgdata)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()
        # Whatever happened above, leave no PostgreSQL behind.
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((pgdata / "postmaster.pid").read_text().split()[0]), signal.SIGKILL)


async def test_sigkill_of_the_embedded_postgres_gives_503s_then_recovers_without_losing_writes(
    running_server: RunningServer,
) -> None:
    headers = {"Authorization": f"Bearer {running_server.key}"}
    acknowledged: list[str] = []
    statuses: dict[int, int] = {}
    retry_after_missing = 0
    healthz_down_seen = False
    killed_at = 0.0
    recovered_after: float | None = None
    stop = asyncio.Event()
    recovered = asyncio.Event()

    async def writer(http: httpx.AsyncClient, n: int) -> None:
        nonlocal retry_after_missing, recovered_after
        i = 0
        while not stop.is_set():
            i += 1
            try:
                answer = await http.post(
                    "/v1/facts", json={"content": f"writer {n} fact {i} {uuid.uuid4()}"}, headers=headers
                )
            except httpx.HTTPError as exc:  # a dropped connection would be a failure of its own
                statuses[-1] = statuses.get(-1, 0) + 1
                print("transport error", repr(exc))
                continue
            statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
            if answer.status_code == 201:
                acknowledged.append(answer.json()["id"])
                if killed_at and recovered_after is None:
                    recovered_after = time.monotonic() - killed_at
                    recovered.set()
            elif answer.status_code == 503:
                retry_after_missing += "retry-after" not in answer.headers
                await asyncio.sleep(0.05)

    async def keyless(http: httpx.AsyncClient) -> None:
        # Authentication needs the database too: a request without a valid key gets 401 or 503.
        while not stop.is_set():
            answer = await http.get(
                f"/v1/memories/{uuid.uuid4()}", headers={"Authorization": "Bearer rk_nope"}
            )
            statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
            await asyncio.sleep(0.05)

    async def health(http: httpx.AsyncClient) -> None:
        nonlocal healthz_down_seen
        while not stop.is_set():
            healthz_down_seen |= (await http.get("/healthz")).status_code == 503
            await asyncio.sleep(0.05)

    async with httpx.AsyncClient(base_url=running_server.url, timeout=30) as http:
        tasks = [asyncio.create_task(writer(http, n)) for n in range(3)]
        tasks += [asyncio.create_task(keyless(http)), asyncio.create_task(health(http))]
        await asyncio.sleep(1.5)
        before = len(acknowledged)
        assert before > 0
        postmaster = int((running_server.pgdata / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGKILL)
        killed_at = time.monotonic()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(recovered.wait(), 20)
        await asyncio.sleep(1.0)  # keep writing a little after the recovery
        stop.set()
        await asyncio.gather(*tasks)

        assert recovered_after is not None and recovered_after < 15, statuses
        assert set(statuses) <= {201, 401, 503}, statuses
        assert statuses.get(503, 0) > 0, statuses
        assert retry_after_missing == 0
        assert healthz_down_seen
        # The supervisor marks the server up once pg_ctl returns, a moment after it accepts work.
        while (await http.get("/healthz")).status_code != 200:
            assert time.monotonic() - killed_at < 30
            await asyncio.sleep(0.1)
        ready = await http.get("/readyz")
        assert ready.status_code == 200, ready.text
        for memory_id in acknowledged:
            found = await http.get(f"/v1/memories/{memory_id}", headers=headers)
            assert found.status_code == 200, memory_id
