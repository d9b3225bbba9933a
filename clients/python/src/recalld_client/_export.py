"""The tenant export (NDJSON) as it arrives: parsed line by line, or copied into a file, never held whole.

The export's last line counts the rows of each table; a stream that ends without it was cut off,
which is an APIConnectionError here rather than a file that looks complete.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import httpx

from recalld_client._core import Call, make_call
from recalld_client.errors import APIConnectionError


class Writable(Protocol):
    """A file opened for binary writing (only `write` is used; the caller closes it)."""

    def write(self, data: bytes, /) -> object:
        """Write data."""


# Where an export goes: a path (gzip when it ends in .gz, as `recalld export --output`) or a binary file.
ExportTarget = str | os.PathLike[str] | Writable
# The end line is a few hundred bytes; the last chunks are kept to find it.
_TAIL_BYTES = 64 * 1024


def export_call(with_embeddings: bool | None) -> Call:
    """The tenant_export request."""
    return make_call("tenant_export", params={"with_embeddings": with_embeddings})


def _cut_off(reason: str) -> APIConnectionError:
    return APIConnectionError(f"the tenant export was cut off ({reason}); export again")


def _end_counts(last: Any) -> dict[str, int]:
    if not isinstance(last, dict) or last.get("end") is not True:
        raise _cut_off("no end line")
    rows: dict[str, int] = last["rows"]
    return rows


def _last_line(tail: bytes) -> Any:
    try:
        return json.loads(tail.rstrip(b"\n").rsplit(b"\n", 1)[-1])
    except ValueError:
        return None  # the stream stopped inside a line


def _parsed(line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError as exc:
        raise _cut_off("a line ends early") from exc


def parse_lines(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """Each line of a streamed export, parsed as it arrives."""
    last: Any = None
    try:
        for line in response.iter_lines():
            if line.strip():
                last = _parsed(line)
                yield last
    except httpx.TransportError as exc:
        raise _cut_off(type(exc).__name__) from exc
    _end_counts(last)


async def aparse_lines(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """`parse_lines` for AsyncClient."""
    last: Any = None
    try:
        async for line in response.aiter_lines():
            if line.strip():
                last = _parsed(line)
                yield last
    except httpx.TransportError as exc:
        raise _cut_off(type(exc).__name__) from exc
    _end_counts(last)


def _open(target: ExportTarget) -> tuple[Writable, Callable[[bool], None]]:
    """The file to write and what to do when done (complete or not): a path is written beside it, then renamed."""
    if not isinstance(target, str | os.PathLike):
        return target, lambda complete: None  # the caller's file: the caller closes it
    path = Path(target)
    partial = path.with_name(path.name + ".part")
    # Closed by finish(), which every caller reaches through its try/finally.
    out = gzip.open(partial, "wb") if path.suffix == ".gz" else open(partial, "wb")  # noqa: SIM115

    def finish(complete: bool) -> None:
        out.close()
        if complete:
            os.replace(partial, path)
        else:
            partial.unlink(missing_ok=True)

    return out, finish


def save(response: httpx.Response, target: ExportTarget) -> dict[str, int]:
    """Copy a streamed export into target; returns the rows of each table its end line counts."""
    out, finish = _open(target)
    complete = False
    tail = b""
    try:
        for chunk in response.iter_bytes():
            out.write(chunk)
            tail = (tail + chunk)[-_TAIL_BYTES:]
        counts = _end_counts(_last_line(tail))
        complete = True
        return counts
    except httpx.TransportError as exc:
        raise _cut_off(type(exc).__name__) from exc
    finally:
        finish(complete)


async def asave(response: httpx.Response, target: ExportTarget) -> dict[str, int]:
    """`save` for AsyncClient; the file is written from a worker thread."""
    out, finish = await asyncio.to_thread(_open, target)
    complete = False
    tail = b""
    try:
        async for chunk in response.aiter_bytes():
            await asyncio.to_thread(out.write, chunk)
            tail = (tail + chunk)[-_TAIL_BYTES:]
        counts = _end_counts(_last_line(tail))
        complete = True
        return counts
    except httpx.TransportError as exc:
        raise _cut_off(type(exc).__name__) from exc
    finally:
        await asyncio.to_thread(finish, complete)
