"""What Client and AsyncClient share: the operation table, request bodies, retry decisions."""

from __future__ import annotations

import email.utils
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from recalld_client.errors import APIConnectionError, APITimeoutError, error_from_response
from recalld_client.models import BatchIn, BatchItem, ScopeSettings

__version__ = "0.1.0"

# operation id (as in the OpenAPI document and the MCP tools) -> HTTP method and path template.
OPERATIONS: dict[str, tuple[str, str]] = {
    "healthz": ("GET", "/healthz"),
    "readyz": ("GET", "/readyz"),
    "metrics": ("GET", "/metrics"),
    "memory_store_fact": ("POST", "/v1/facts"),
    "memory_store_rule": ("POST", "/v1/rules"),
    "memory_store_episode": ("POST", "/v1/episodes"),
    "memory_store_batch": ("POST", "/v1/memories:batch"),
    "memory_list": ("GET", "/v1/memories"),
    "memory_get": ("GET", "/v1/memories/{memory_id}"),
    "memory_history": ("GET", "/v1/memories/{memory_id}/history"),
    "memory_confirm": ("POST", "/v1/memories/{memory_id}/confirm"),
    "memory_forget": ("DELETE", "/v1/memories/{memory_id}"),
    "memory_search": ("POST", "/v1/search"),
    "memory_recall": ("POST", "/v1/recall"),
    "scope_settings_get": ("GET", "/v1/scopes/{scope}/settings"),
    "scope_settings_put": ("PUT", "/v1/scopes/{scope}/settings"),
    "document_put": ("PUT", "/v1/documents"),
    "document_get": ("GET", "/v1/documents"),
    "document_list": ("GET", "/v1/documents:list"),
    "document_delete": ("DELETE", "/v1/documents"),
    "code_index_files": ("PUT", "/v1/code/files"),
    "code_list_files": ("GET", "/v1/code/files"),
    "code_delete_file": ("DELETE", "/v1/code/files"),
    "code_research": ("POST", "/v1/code/research"),
    "tenant_export": ("GET", "/v1/export"),
}

DEFAULT_BASE_URL = "http://127.0.0.1:8080"
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_RETRIES = 3
# Longest single wait the client accepts; a longer Retry-After is raised to the caller at once.
DEFAULT_MAX_RETRY_WAIT = 30.0
# recalld answers these when nothing was changed and a later attempt may succeed.
RETRY_STATUSES = frozenset({429, 503})
# POSTs that change nothing (or nothing more when sent twice): safe to resend after a lost answer.
_REPLAYABLE_POSTS = frozenset({"memory_search", "memory_recall", "memory_confirm", "code_research"})

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Call:
    """One HTTP request of an operation, ready to send (and to resend)."""

    operation: str
    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] | None = None
    # Sending it twice does what sending it once does, so a connection that broke before the
    # answer arrived is retried: reads, PUTs, and writes that carry idempotency keys.
    replayable: bool = False


def make_call(
    operation: str,
    *,
    path_params: Mapping[str, object] | None = None,
    params: Mapping[str, Any] | None = None,
    json: Any = None,
    content: bytes | None = None,
    headers: dict[str, str] | None = None,
    replayable: bool | None = None,
) -> Call:
    """The request of `operation`; query parameters that are None are left out."""
    method, template = OPERATIONS[operation]
    path = template.format(**{k: quote(str(v), safe="") for k, v in (path_params or {}).items()})
    query = {k: v for k, v in (params or {}).items() if v is not None}
    if replayable is None:
        replayable = method in ("GET", "PUT") or operation in _REPLAYABLE_POSTS
    return Call(operation, method, path, query or None, json, content, headers, replayable)


def body(model: type[M], values: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON body of `model` from a method's arguments: only those given (None = the server's default)."""
    given = {k: v for k, v in values.items() if k in model.model_fields and v is not None}
    return model.model_validate(given).model_dump(mode="json", by_alias=True, exclude_unset=True)


def query_time(value: datetime | None) -> str | None:
    """A time as a query parameter: ISO 8601 (str() would put a space between date and time)."""
    return None if value is None else value.isoformat()


def new_idempotency_key() -> str:
    """A fresh key for one logical write, reused by every retry of it."""
    return f"rc-{uuid.uuid4().hex}"


def with_idempotency_key(item: dict[str, Any]) -> dict[str, Any]:
    """The item with an idempotency_key of its own unless it has one."""
    if item.get("idempotency_key") is None:
        item["idempotency_key"] = new_idempotency_key()
    return item


def write_call(operation: str, item: dict[str, Any], idempotency_keys: bool) -> Call:
    """A memory write, with an idempotency key unless turned off (then resent only if it has one)."""
    if idempotency_keys:
        with_idempotency_key(item)
    return make_call(operation, json=item, replayable=item.get("idempotency_key") is not None)


def batch_call(items: Sequence[BatchItem | Mapping[str, Any]], idempotency_keys: bool) -> Call:
    """memory_store_batch: each item with its `type`, and its own idempotency key by default."""
    out = []
    for item in BatchIn.model_validate({"items": list(items)}).items:
        data = item.model_dump(mode="json", exclude_unset=True)
        data["type"] = item.type
        out.append(with_idempotency_key(data) if idempotency_keys else data)
    replayable = all(data.get("idempotency_key") is not None for data in out)
    return make_call("memory_store_batch", json={"items": out}, replayable=replayable)


def scope_settings_call(scope: str, settings: ScopeSettings | Mapping[str, Any] | str) -> Call:
    """scope_settings_put with JSON settings, or with butler.toml text when `settings` is a string."""
    path_params = {"scope": scope}
    if isinstance(settings, str):
        return make_call(
            "scope_settings_put",
            path_params=path_params,
            content=settings.encode(),
            headers={"Content-Type": "application/toml"},
        )
    model = ScopeSettings.model_validate(settings)
    return make_call(
        "scope_settings_put", path_params=path_params, json=model.model_dump(mode="json", exclude_unset=True)
    )


def parse_retry_after(response: httpx.Response) -> float | None:
    """Retry-After in seconds (delta-seconds or an HTTP date), or None when absent or unreadable."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def backoff(attempt: int) -> float:
    """Wait before retry number `attempt` (0-based) when the server named none: 0.5 s, 1 s, 2 s, … up to 8 s."""
    return float(min(8.0, 0.5 * 2**attempt))


@dataclass(frozen=True, slots=True)
class Settings:
    """Connection and retry settings of a client."""

    base_url: str
    api_key: str | None
    timeout: float
    max_retries: int
    max_retry_wait: float
    idempotency_keys: bool

    @classmethod
    def build(
        cls,
        base_url: str | None,
        api_key: str | None,
        timeout: float,
        max_retries: int,
        max_retry_wait: float,
        idempotency_keys: bool,
    ) -> Settings:
        """Arguments, else RECALLD_URL / RECALLD_API_KEY from the environment."""
        if max_retries < 0:
            raise ValueError("max_retries must be 0 or more")
        url = base_url or os.environ.get("RECALLD_URL") or DEFAULT_BASE_URL
        key = api_key or os.environ.get("RECALLD_API_KEY") or None
        return cls(url.rstrip("/"), key, timeout, max_retries, max_retry_wait, idempotency_keys)

    def headers(self) -> dict[str, str]:
        """Headers sent with every request."""
        headers = {"User-Agent": f"recalld-client/{__version__}", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def retry_delay(self, attempt: int, response: httpx.Response) -> float | None:
        """Seconds to wait before resending after `response`, or None to give up."""
        if response.status_code not in RETRY_STATUSES or attempt >= self.max_retries:
            return None
        delay = parse_retry_after(response)
        if delay is None:
            delay = backoff(attempt)
        return delay if delay <= self.max_retry_wait else None

    def transport_retry_delay(self, attempt: int, call: Call, exc: httpx.TransportError) -> float | None:
        """Seconds to wait before resending after a network failure, or None to give up.

        A connection that could not be made carried nothing, so any call is resent; one that broke
        later only when the call is replayable. Timeouts are the caller's budget: never resent.
        """
        if attempt >= self.max_retries:
            return None
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            return backoff(attempt)
        if isinstance(exc, httpx.TimeoutException) or not call.replayable:
            return None
        return backoff(attempt)


def transport_error(settings: Settings, call: Call, exc: httpx.TransportError) -> APIConnectionError:
    """The exception for a network failure that is not retried (any more)."""
    if isinstance(exc, httpx.TimeoutException):
        return APITimeoutError(f"{call.method} {call.path}: no answer within {settings.timeout} s")
    return APIConnectionError(f"{call.method} {settings.base_url}{call.path}: {type(exc).__name__}: {exc}")


def check(response: httpx.Response) -> httpx.Response:
    """The response when it is a success, else the APIError it stands for."""
    if response.is_success:
        return response
    raise error_from_response(response, retry_after=parse_retry_after(response))


def parse(model: type[M], response: httpx.Response) -> M:
    """The response body as `model`."""
    return model.model_validate(response.json())
