"""Secrets kept in files of the data directory: mode 0600 from creation, complete or absent."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def _write_temporary(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return temporary


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)  # the new directory entry must survive a crash too
    finally:
        os.close(fd)


def write_secret(path: Path, text: str) -> None:
    """Replace path with text atomically (temp file, fsync, rename): a crash leaves old or new."""
    temporary = _write_temporary(path, text)
    try:
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    _sync_directory(path.parent)


def read_or_create_secret(path: Path) -> str:
    """The secret in path; generated first when missing (the first of racing processes wins)."""
    if not path.exists():
        temporary = _write_temporary(path, secrets.token_urlsafe(32) + "\n")
        try:
            with contextlib.suppress(FileExistsError):
                os.link(temporary, path)  # fails if another process was first: use its secret
        finally:
            temporary.unlink(missing_ok=True)
        _sync_directory(path.parent)
    return path.read_text().strip()
