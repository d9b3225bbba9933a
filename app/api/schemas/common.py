"""Field types and the strict base model every request body shares."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from app.services.scopes import MAX_SCOPE_CHARS, SCOPE_PATTERN

MAX_CONTENT_BYTES = 64 * 1024
MAX_QUERY_CHARS = 4000
MIN_YEAR, MAX_YEAR = 1900, 9998
CLOCK_SKEW = timedelta(minutes=5)
MemoryType = Literal["fact", "rule", "episode", "document", "code"]


def _content_size(value: str) -> str:
    if not value.strip():
        raise ValueError("content must not be empty")
    if len(value.encode()) > MAX_CONTENT_BYTES:
        raise ValueError(f"content is larger than {MAX_CONTENT_BYTES} bytes (64 KiB)")
    return value


def _storable_time(value: datetime) -> datetime:
    # Outside these years the driver or date arithmetic overflows (year 1, or 9999 in a
    # timezone west of UTC), which would surface as a 500 instead of a clear 422.
    if not MIN_YEAR <= value.year <= MAX_YEAR:
        raise ValueError(f"must be between the years {MIN_YEAR} and {MAX_YEAR}")
    # A time without an offset is taken as UTC, as PostgreSQL's timestamptz input would.
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _not_in_future(value: datetime) -> datetime:
    # A confidence clock or creation time ahead of now would make decay grow instead of fade.
    if value > datetime.now(UTC) + CLOCK_SKEW:
        raise ValueError("must not be in the future")
    return value


Timestamp = Annotated[datetime, AfterValidator(_storable_time)]
PastTimestamp = Annotated[datetime, AfterValidator(_storable_time), AfterValidator(_not_in_future)]


def _nul_path(value: Any, where: str) -> str | None:
    """Where a NUL character sits in JSON data, or None."""
    if isinstance(value, str):
        return where if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _nul_path(key, where) or _nul_path(item, f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _nul_path(item, f"{where}.{index}" if where else str(index))
            if found is not None:
                return found
    return None


Content = Annotated[
    str,
    Field(max_length=MAX_CONTENT_BYTES, description="The memory text (at most 64 KiB)."),
    AfterValidator(_content_size),
]
ScopeName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_SCOPE_CHARS,
        pattern=SCOPE_PATTERN,
        description="Scope (usually a butler/agent name); `global` is visible from every scope.",
    ),
]
Tag = Annotated[str, Field(min_length=1, max_length=64, description="A label (1–64 characters).")]


class StrictModel(BaseModel):
    """Unknown fields are errors, so typos never pass silently."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _no_nul_characters(cls, data: Any) -> Any:
        # PostgreSQL text and jsonb cannot hold U+0000; without this check it is a 500.
        where = _nul_path(data, "")
        if where is not None:
            raise ValueError(
                f"{where or 'the body'} contains a NUL character (\\u0000), which cannot be stored"
            )
        return data
