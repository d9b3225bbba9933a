"""What reaches the log: no query strings, no exception messages (both can carry user input or keys)."""

from __future__ import annotations

import logging
import traceback

import asyncpg


class DropQueryString(logging.Filter):
    """uvicorn's access log without the query string: a key sent as `?api_key=` must not be logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the request path argument in place; never drops a record."""
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], args[2].partition("?")[0], *args[3:])
        return True


def redact_access_log() -> None:
    """Install DropQueryString on uvicorn's access logger (after uvicorn configured logging)."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, DropQueryString) for f in access.filters):
        access.addFilter(DropQueryString())


def describe_exception(exc: BaseException) -> str:
    """Exception types and stack frames of exc and its causes, without their messages.

    Messages quote their input ("invalid input for query argument $1: '<the user's text>'"); the
    frames and the SQLSTATE are what debugging needs.
    """
    lines: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        sqlstate = f" (SQLSTATE {current.sqlstate})" if isinstance(current, asyncpg.PostgresError) else ""
        lines.append(f"{type(current).__module__}.{type(current).__qualname__}{sqlstate}")
        lines.extend(
            f"  {frame.filename}:{frame.lineno} in {frame.name}"
            for frame in traceback.extract_tb(current.__traceback__)
        )
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return "\n".join(lines)
