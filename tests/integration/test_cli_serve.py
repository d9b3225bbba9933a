"""`recalld serve` and the CLI as a user runs them: bootstrap, keys, crash and restart."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.support import ROOT, free_port, wait_ready


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


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "pg" / "postmaster.pid").read_text().split()[0])


def test_serve_bootstraps_keys_and_survives_sigkill(data_dir: Path) -> None:
    port = free_port()
    server = _serve(data_dir, port)
    try:
        wait_ready(port, server)
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
        # The README's second example, as written there.
        found = httpx.post(
            f"{url}/v1/search",
            json={"query": "Sintra", "mode": "keyword", "types": ["document"]},
            headers=headers,
        )
        hits = found.json()["results"]
        assert [(h["path"], h["start_line"], h["end_line"]) for h in hits] == [("memory/2026-11-21.md", 1, 5)]
        start, end = hits[0]["highlights"][0]
        assert hits[0]["content"][start:end] == "Sintra"
        line = httpx.get(
            f"{url}/v1/documents",
            params={"path": "memory/2026-11-21.md", "from": 5, "lines": 1},
            headers=headers,
        )
        assert (
            line.json()["content"]
            == "- Started planning Ana's visit: train tickets to Sintra for 6 December."
        )

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
        wait_ready(port, server)
        got = httpx.get(f"http://127.0.0.1:{port}/v1/memories/{fact_id}", headers=headers)
        assert got.status_code == 200
        assert got.json()["content"] == "Acknowledged before the crash"
        assert key_file.read_text().strip() == admin_key  # no second bootstrap
        # Keyword search (BM25 postings) still finds what was written before the crash.
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


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    raise AssertionError(f"gave up waiting for {what}")


BUTLER_TOML = """[butler]
name = "health"

[butler.memory.retrieval]
score_weights = { relevance = 0.6, importance = 0.1, recency = 0.2, confidence = 0.1 }
"""


def test_cli_tenants_scopes_import_and_index_watch(data_dir: Path, tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = _serve(data_dir, port)
    watcher: subprocess.Popen[str] | None = None
    try:
        wait_ready(port, server)
        created = _recalld(data_dir, "tenants", "create", "acme")
        assert created.returncode == 0, created.stderr
        assert re.fullmatch(r"[0-9a-f-]{36}\n", created.stdout)
        again = _recalld(data_dir, "tenants", "create", "acme")
        assert again.returncode == 1
        assert again.stderr == "recalld: tenant 'acme' already exists\n"
        key = _recalld(data_dir, "keys", "create", "--tenant", "acme", "--role", "admin").stdout.strip()
        headers = {"Authorization": f"Bearer {key}"}

        butler = tmp_path / "butler.toml"
        butler.write_text(BUTLER_TOML)
        imported = _recalld(data_dir, "scopes", "import", str(butler), "--tenant", "acme")
        assert imported.returncode == 0, imported.stderr
        assert imported.stdout == ""
        settings = httpx.get(f"{url}/v1/scopes/health/settings", headers=headers).json()
        assert settings == {
            "score_weights": {"relevance": 0.6, "importance": 0.1, "recency": 0.2, "confidence": 0.1}
        }
        recall = httpx.post(f"{url}/v1/recall", json={"topic": "x", "scope": "health"}, headers=headers)
        assert recall.json()["weights"]["relevance"] == 0.6
        default_tenant = httpx.get(
            f"{url}/v1/scopes/health/settings",
            headers={"Authorization": f"Bearer {(data_dir / 'admin.key').read_text().strip()}"},
        )
        assert default_tenant.json() == {}

        broken = tmp_path / "broken.toml"
        broken.write_text("[butler\n")
        bad_weights = tmp_path / "bad.toml"
        bad_weights.write_text(BUTLER_TOML.replace("relevance = 0.6", "relevance = -1"))
        bad_name = tmp_path / "bad-name.toml"
        bad_name.write_text(BUTLER_TOML.replace('"health"', '"no spaces allowed"'))
        for path, message in (
            (tmp_path / "missing.toml", "cannot read"),
            (broken, "invalid TOML"),
            (bad_weights, "score_weights.relevance: Input should be greater than or equal to 0"),
            (bad_name, "invalid scope name 'no spaces allowed'"),
        ):
            failed = _recalld(data_dir, "scopes", "import", str(path), "--tenant", "acme")
            assert failed.returncode == 1, path
            assert message in failed.stderr and "Traceback" not in failed.stderr, failed.stderr

        refused = _recalld(data_dir, "index", "examples/memory", "--url", url, "--key", "rk_00000000_nope")
        assert refused.returncode == 1
        assert refused.stderr == f"recalld: recalld at {url} answered 401: invalid or revoked API key\n"

        # index --watch: edits are uploaded, and a file deleted on disk is forgotten on the server.
        folder = tmp_path / "memory-folder"
        shutil.copytree(ROOT / "examples" / "memory", folder)
        watcher = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "index", str(folder), "--url", url, "--key", key, "--watch"],
            cwd=ROOT,
            env=_env(data_dir),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            # A shell without job control starts background commands with SIGINT ignored, and the
            # child would inherit that (then Ctrl-C cannot reach it): give it a terminal's default.
            preexec_fn=_default_sigint,
        )
        assert watcher.stdout is not None
        assert watcher.stdout.readline().startswith("uploaded 4, unchanged 0, failed 0, removed 0")

        def stored() -> dict[str, str]:
            listing = httpx.get(f"{url}/v1/documents:list", headers=headers).json()["documents"]
            return {d["path"]: d["content_hash"] for d in listing}

        first = stored()
        (folder / "memory" / "2026-11-18.md").unlink()
        with (folder / "MEMORY.md").open("a") as handle:
            handle.write("- The user's bike is a green Brompton.\n")
        edited = (folder / "MEMORY.md").read_text()
        checks = iter(range(10**6))

        def synced() -> bool:
            # The watcher prints its first summary before it starts watching: edits made in between
            # go unseen. Writing the same text again every few seconds is a new change event, and
            # each sync compares the whole folder, deletion included.
            if next(checks) % 10 == 9:
                (folder / "MEMORY.md").write_text(edited)
            listing = stored()
            return (
                set(listing) == {"MEMORY.md", "memory/2026-11-20.md", "memory/2026-11-21.md"}
                and listing["MEMORY.md"] != first["MEMORY.md"]
            )

        _wait_for(synced, "the watcher to sync a deletion and an edit")
        found = httpx.post(f"{url}/v1/search", json={"query": "Brompton", "mode": "keyword"}, headers=headers)
        assert [(r["path"], r["end_line"]) for r in found.json()["results"]] == [("MEMORY.md", 17)]
        watcher.send_signal(signal.SIGINT)
        assert watcher.wait(30) == 130

        server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0
        log = server.stdout.read() if server.stdout else ""
        assert "keyword ranker bm25" in log
    finally:
        for process in (watcher, server):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(10)
