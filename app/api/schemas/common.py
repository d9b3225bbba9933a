"""Field types and the strict base model every request body shares."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from app.input_rules import MAX_BODY_DEPTH, InputRuleError, check_json_value, check_metadata
from app.services.scopes import MAX_SCOPE_CHARS, SCOPE_PATTERN

MAX_CONTENT_BYTES = 64 * 1024
MAX_QUERY_CHARS = 4000
MIN_YEAR, MAX_YEAR = 1900, 9998
CLOCK_SKEW = timedelta(minutes=5)
MAX_TENANTS = 1000
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


def _in_future(value: datetime) -> datetime:
    # An episode that expires before it is stored would be accepted with 201 and then be a 404.
    if value <= datetime.now(UTC):
        raise ValueError("must be in the future (an expired episode would never be returned)")
    return value


def _metadata_rules(value: dict[str, Any]) -> dict[str, Any]:
    try:
        return check_metadata(value)
    except InputRuleError as exc:
        raise PydanticCustomError("metadata_invalid", str(exc)) from exc


FutureTimestamp = Annotated[datetime, AfterValidator(_storable_time), AfterValidator(_in_future)]
Metadata = Annotated[dict[str, Any], AfterValidator(_metadata_rules)]


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
TenantName = Annotated[str, Field(min_length=1, max_length=200, description="A tenant's name.")]


class StrictModel(BaseModel):
    """Unknown fields are errors, so typos never pass silently."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _storable_json(cls, data: Any) -> Any:
        # Before any field is looked at: NUL, lone surrogates and NaN cannot be stored (or sent
        # back), and deep nesting must be refused without recursing into it.
        try:
            check_json_value(data, max_depth=MAX_BODY_DEPTH)
        except InputRuleError as exc:
            raise PydanticCustomError("json_invalid_value", str(exc)) from exc
        return data
