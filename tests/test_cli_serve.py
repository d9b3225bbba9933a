"""`recalld serve` and the CLI as a user runs them: bootstrap, keys, crash and restart."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def data_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))
    yield path
    pid_file = path / "pg" / "postmaster.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text().split()[0])
        if psutil.pid_exists(pid):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    # Not about semantics: keyword-only keeps each start fast.
    env.update(RECALLD_DATA_DIR=str(data_dir), RECALLD_EMBEDDING_PROVIDER="none", HF_HUB_OFFLINE="1")
    return env


def _recalld(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env=_env(data_dir),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _serve(data_dir: Path, port: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
        cwd=ROOT,
        env=_env(data_dir),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_ready(port: int, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError("recalld did not become ready")


def _postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "pg" / "postmaster.pid").read_text().split()[0])


def test_serve_bootstraps_keys_and_survives_sigkill(data_dir: Path) -> None:
    port = _free_port()
    server = _serve(data_dir, port)
    try:
        _wait_ready(port, server)
        key_file = data_dir / "admin.key"
        assert key_file.stat().st_mode & 0o777 == 0o600
        admin_key = key_file.read_text().strip()
        assert re.fullmatch(r"rk_[0-9a-f]{8}_[A-Za-z0-9_-]{43}", admin_key)
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz").json()
        assert ready["checks"]["keyword_ranker"] == "bm25"
        assert ready["checks"]["embedder"] == {"provider": "none", "loaded": False}

        # The CLI works on the same data directory while the server runs; stdout is only the key.
        created = _recalld(data_dir, "keys", "create", "--tenant", "default", "--role", "writer")
        assert created.returncode == 0, created.stderr
        writer_key = created.stdout.strip()
        assert created.stdout.count("\n") == 1 and writer_key.startswith("rk_")
        unknown = _recalld(data_dir, "keys", "create", "--tenant", "nope", "--role", "reader")
        assert unknown.returncode == 1 and "no tenant named 'nope'" in unknown.stderr

        headers = {"Authorization": f"Bearer {writer_key}"}
        url = f"http://127.0.0.1:{port}"
        indexed = _recalld(data_dir, "index", "examples/memory", "--url", url, "--key", writer_key)
        assert indexed.returncode == 0, indexed.stderr
        assert indexed.stdout.startswith("uploaded 4, unchanged 0, failed 0")
        again = _recalld(data_dir, "index", "examples/memory", "--url", url, "--key", writer_key)
        assert again.stdout.startswith("uploaded 0, unchanged 4, failed 0")
        found = httpx.post(f"{url}/v1/search", json={"query": "Sintra"}, headers=headers)
        assert found.json()["results"][0]["path"] == "memory/2026-11-21.md"

        stored = httpx.post(
            f"http://127.0.0.1:{port}/v1/facts",
            json={"content": "Acknowledged before the crash"},
            headers=headers,
        )
        assert stored.status_code == 201
        fact_id = stored.json()["id"]

        # Crash both the service and PostgreSQL itself.
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        os.kill(_postmaster_pid(data_dir), signal.SIGKILL)
        time.sleep(2)

        server = _serve(data_dir, port)
        _wait_ready(port, server)
        got = httpx.get(f"http://127.0.0.1:{port}/v1/memories/{fact_id}", headers=headers)
        assert got.status_code == 200
        assert got.json()["content"] == "Acknowledged before the crash"
        assert key_file.read_text().strip() == admin_key  # no second bootstrap
        # Keyword search (BM25 index) still finds what was written before the crash.
        found = httpx.post(f"{url}/v1/search", json={"query": "acknowledged crash"}, headers=headers)
        assert [r["id"] for r in found.json()["results"]] == [fact_id]
        sintra = httpx.post(f"{url}/v1/search", json={"query": "Sintra"}, headers=headers)
        assert sintra.json()["results"][0]["path"] == "memory/2026-11-21.md"

        revoked = _recalld(data_dir, "keys", "revoke", writer_key)
        assert revoked.returncode == 0, revoked.stderr
        after = httpx.get(f"http://127.0.0.1:{port}/v1/memories/{fact_id}", headers=headers)
        assert after.status_code == 401

        # SIGTERM stops uvicorn and then PostgreSQL cleanly.
        postmaster = _postmaster_pid(data_dir)
        server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0
        deadline = time.monotonic() + 15
        while psutil.pid_exists(postmaster) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not psutil.pid_exists(postmaster)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(10)
