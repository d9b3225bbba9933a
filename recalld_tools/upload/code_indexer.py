"""`recalld index --code`: upload a source tree through PUT /v1/code/files."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.hashing import content_hash
from app.ingest.paths import CODE_SUFFIXES, MAX_CODE_FILE_CHARS
from recalld_tools.progress import progress_bar
from recalld_tools.upload.indexer import iter_files

BATCH_FILES = 40
BATCH_BYTES = 2 * 1024 * 1024


@dataclass(slots=True)
class CodeIndexStats:
    """Counts reported at the end of a code index run."""

    uploaded: int = 0
    unchanged: int = 0
    removed: int = 0
    failed: int = 0
    chunks: int = 0
    symbols: int = 0
    edges: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line for people and scripts."""
        rate = self.uploaded / self.seconds if self.seconds > 0 else 0.0
        return (
            f"uploaded {self.uploaded}, unchanged {self.unchanged}, removed {self.removed}, failed {self.failed}, "
            f"chunks {self.chunks}, symbols {self.symbols}, edges {self.edges} "
            f"in {self.seconds:.1f}s ({rate:.1f} files/s)"
        )


def source_files(root: Path) -> list[Path]:
    """The files `recalld index --code` uploads: source suffixes, .gitignore respected, not too big."""
    # A file of at most that many bytes has at most that many characters: the server accepts it.
    return [p for p in iter_files(root, CODE_SUFFIXES) if p.stat().st_size <= MAX_CODE_FILE_CHARS]


def index_code(client: httpx.Client, root: Path, *, repository: str, progress: bool = True) -> CodeIndexStats:
    """Upload changed source files, remove files that disappeared, skip the rest."""
    started = time.perf_counter()
    stats = CodeIndexStats()
    listing = client.get("/v1/code/files", params={"repository": repository})
    listing.raise_for_status()
    stored = {f["path"]: f["content_hash"] for f in listing.json()["files"]}
    files = source_files(root)
    bar = progress_bar(len(files), "index", enabled=progress)
    batch: list[dict[str, str]] = []
    size = 0
    present: set[str] = set()
    for path in files:
        rel = path.relative_to(root).as_posix()
        present.add(rel)
        content = path.read_text(errors="replace")
        if stored.get(rel) == content_hash(content):
            stats.unchanged += 1
        else:
            batch.append({"path": rel, "content": content})
            size += len(content)
            if len(batch) >= BATCH_FILES or size >= BATCH_BYTES:
                _send(client, repository, batch, stats)
                batch, size = [], 0
        bar.update()
    bar.close()
    if batch:
        _send(client, repository, batch, stats)
    for gone in sorted(set(stored) - present):
        response = client.delete("/v1/code/files", params={"repository": repository, "path": gone})
        if response.status_code == 204:
            stats.removed += 1
    stats.seconds = time.perf_counter() - started
    return stats


def _send(client: httpx.Client, repository: str, batch: list[dict[str, str]], stats: CodeIndexStats) -> None:
    response = client.put("/v1/code/files", json={"repository": repository, "files": batch})
    if response.status_code != 200:
        stats.failed += len(batch)
        stats.errors.append(
            f"{batch[0]['path']} (+{len(batch) - 1}): {response.status_code} {response.text[:200]}"
        )
        return
    body: dict[str, Any] = response.json()
    stats.uploaded += body["files"]
    stats.unchanged += body["skipped"]
    stats.chunks += body["chunks"]
    stats.symbols += body["symbols"]
    stats.edges += body["edges"]
