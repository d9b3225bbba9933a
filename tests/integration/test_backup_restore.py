"""`recalld backup` while a server serves and writes go on, then `recalld restore` into a new data directory."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.support import TenantKeys
from tests.support import free_port as _free_port
from tests.support import wait_ready as _wait_ready
from tests.tenant_content import fill, snapshot

ROOT = Path(__file__).resolve().parents[2]


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    # Not about semantics (the copy is byte for byte): keyword-only keeps the three starts fast.
    env.update(RECALLD_DATA_DIR=str(data_dir), RECALLD_EMBEDDING_PROVIDER="none", HF_HUB_OFFLINE="1")
    return env


async def _recalld(data_dir: Path, *args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "app.cli",
        *args,
        cwd=ROOT,
        env=_env(data_dir),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    assert process.returncode is not None
    return process.returncode, output.decode()


@contextlib.contextmanager
def _serving(data_dir: Path) -> Iterator[str]:
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
        cwd=ROOT,
        env=_env(data_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_ready(port, server)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="bk-", dir="/tmp"))
    yield path
    for cluster in ("a", "b"):
        pid_file = path / cluster / "pg" / "postmaster.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text().split()[0])
            if psutil.pid_exists(pid):
                os.kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


async def _fact_count(http: httpx.AsyncClient, key: str) -> int:
    count, cursor = 0, None
    while True:
        params: dict[str, str | int] = {
            "type": "fact",
            "limit": 100,
            **({"cursor": cursor} if cursor else {}),
        }
        page = (
            await http.get("/v1/memories", params=params, headers={"Authorization": f"Bearer {key}"})
        ).json()
        count += len(page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            return count


async def test_backup_while_serving_restores_the_same_listings_and_searches(scratch: Path) -> None:
    original, restored, backup = scratch / "a", scratch / "b", scratch / "backup"
    with _serving(original) as url:
        admin = (original / "admin.key").read_text().strip()
        tenant = TenantKeys(name="default", id="", reader=admin, writer=admin, admin=admin)
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            await fill(http, tenant)
            code, output = await _recalld(original, "tenants", "create", "busy")
            assert code == 0, output
            code, busy = await _recalld(original, "keys", "create", "--tenant", "busy", "--role", "writer")
            assert code == 0, busy
            busy = busy.strip().splitlines()[-1]
            acknowledged = 0
            stop = asyncio.Event()

            async def write() -> None:
                nonlocal acknowledged
                while not stop.is_set():
                    response = await http.post(
                        "/v1/facts",
                        json={"content": f"write number {acknowledged}"},
                        headers={"Authorization": f"Bearer {busy}"},
                    )
                    assert response.status_code == 201, response.text
                    acknowledged += 1
                    # About 20 writes/s: busy, yet under the key's default rate limit (50/s after a
                    # burst of 100), which an unpaced loop on an idle machine runs into.
                    await asyncio.sleep(0.05)

            writer = asyncio.create_task(write())
            await asyncio.sleep(0.5)
            before_backup = acknowledged
            code, output = await _recalld(original, "backup", str(backup))
            after_backup = acknowledged
            stop.set()
            await writer
            assert code == 0, output
            assert "verified" in output
            seen = await snapshot(http, tenant)

    code, output = await _recalld(original, "restore", str(backup))
    assert code == 1 and "not empty" in output
    code, output = await _recalld(restored, "restore", str(scratch / "nothing-here"))
    assert code == 1 and "not a recalld backup" in output
    code, output = await _recalld(restored, "restore", str(backup))
    assert code == 0, output
    assert "2 tenants" in output

    with _serving(restored) as url:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            assert await snapshot(http, tenant) == seen
            # The writes that went on during the backup: all acknowledged before it began are there,
            # none acknowledged after it ended could be.
            assert before_backup <= await _fact_count(http, busy) <= after_backup + 1
