"""`recalld index`: upload a folder of markdown memory files (or source code) through the API."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pathspec

from app.hashing import content_hash
from app.ingest.paths import DOCUMENT_SUFFIXES
from recalld_tools.progress import progress_bar

ALWAYS_SKIPPED = (
    ".git",
    ".venv",
    "venv",
    "node_modules",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
)


@dataclass(slots=True)
class IndexStats:
    """Counts reported at the end of an index run."""

    uploaded: int = 0
    unchanged: int = 0
    failed: int = 0
    chunks: int = 0
    embedded: int = 0
    removed: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    present: set[str] = field(default_factory=set)

    def summary(self) -> str:
        """One line for people and scripts."""
        rate = (self.uploaded + self.unchanged) / self.seconds if self.seconds > 0 else 0.0
        return (
            f"uploaded {self.uploaded}, unchanged {self.unchanged}, failed {self.failed}, "
            f"removed {self.removed}, chunks {self.chunks}, embedded {self.embedded} "
            f"in {self.seconds:.1f}s ({rate:.1f} files/s)"
        )


def _ignore_patterns(ignore: Path, base: str) -> list[str]:
    """The patterns of one .gitignore, anchored at its folder (base, relative to the walk's root)."""
    patterns: list[str] = []
    for raw in ignore.read_text(errors="replace").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:] if negate else line
        if base != ".":
            pattern = (
                f"{base}/{pattern.lstrip('/')}" if "/" in pattern.rstrip("/") else f"{base}/**/{pattern}"
            )
        patterns.append(("!" if negate else "") + pattern)
    return patterns


def iter_files(root: Path, suffixes: tuple[str, ...]) -> Iterator[Path]:
    """Files under root with one of the suffixes, .gitignore respected, in sorted order."""
    lines: list[str] = []
    spec = pathspec.GitIgnoreSpec.from_lines(lines)
    found: list[Path] = []
    # Top-down, so a folder's .gitignore is read before anything it governs; ignored folders are
    # pruned, not walked: a .venv or node_modules holds tens of thousands of files, and listing
    # them made a no-change re-index of this repository take 8 s.
    for folder, dirnames, filenames in os.walk(root):
        here = Path(folder)
        rel_folder = here.relative_to(root)
        if ".gitignore" in filenames:
            lines.extend(_ignore_patterns(here / ".gitignore", rel_folder.as_posix()))
            spec = pathspec.GitIgnoreSpec.from_lines(lines)
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in ALWAYS_SKIPPED and not spec.match_file((rel_folder / d).as_posix() + "/")
        )
        for name in filenames:
            rel = rel_folder / name
            if rel.suffix.lower() in suffixes and not spec.match_file(rel.as_posix()):
                found.append(here / name)
    yield from sorted(found)


def index_markdown(
    client: httpx.Client,
    root: Path,
    *,
    scope: str = "global",
    progress: bool = True,
    forget: Collection[str] = (),
) -> IndexStats:
    """Upload files under root that differ from the stored copy; delete `forget` paths gone from root."""
    # Only paths in `forget` are ever deleted: agents also write documents through the API.
    started = time.perf_counter()
    stats = IndexStats()
    listing = client.get("/v1/documents:list")
    listing.raise_for_status()
    stored = {d["path"]: d["content_hash"] for d in listing.json()["documents"]}
    files = list(iter_files(root, DOCUMENT_SUFFIXES))
    bar = progress_bar(len(files), "index", enabled=progress)
    for path in files:
        rel = path.relative_to(root).as_posix()
        stats.present.add(rel)
        content = path.read_text(errors="replace")
        if stored.get(rel) == content_hash(content):
            stats.unchanged += 1
        else:
            _upload_document(client, rel, content, scope, stats)
        bar.update()
    bar.close()
    for gone in sorted(set(forget) - stats.present):
        response = client.delete("/v1/documents", params={"path": gone})
        if response.status_code == 204:
            stats.removed += 1
        elif response.status_code != 404:
            stats.failed += 1
            stats.errors.append(f"{gone}: {response.status_code} {error_message(response)}")
    stats.seconds = time.perf_counter() - started
    return stats


def _upload_document(client: httpx.Client, rel: str, content: str, scope: str, stats: IndexStats) -> None:
    response = client.put("/v1/documents", json={"path": rel, "content": content, "scope": scope})
    if response.status_code != 200:
        stats.failed += 1
        stats.errors.append(f"{rel}: {response.status_code} {error_message(response)}")
        return
    body: dict[str, Any] = response.json()
    stats.uploaded += 0 if body["unchanged"] else 1
    stats.unchanged += 1 if body["unchanged"] else 0
    stats.chunks += body["chunks"]
    stats.embedded += body["embedded"]


def error_message(response: httpx.Response) -> str:
    """The message of a recalld error body, or the start of whatever else came back."""
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200]


def watch(root: Path, on_change: Callable[[], IndexStats]) -> None:
    """Re-run the index whenever files under root change (Ctrl-C stops)."""
    from watchfiles import watch as watch_changes

    for _ in watch_changes(root):
        stats = on_change()
        print(stats.summary(), file=sys.stderr, flush=True)
