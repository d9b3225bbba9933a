"""Exceptions: every error response of recalld becomes an APIError subclass chosen by its status."""

from __future__ import annotations

from typing import Any

import httpx


class RecalldError(Exception):
    """Base class of everything this client raises on purpose."""


class APIConnectionError(RecalldError):
    """recalld could not be reached (retries spent), or the connection broke during a request."""


class APITimeoutError(APIConnectionError):
    """No answer within the client's timeout."""


class APIError(RecalldError):
    """An error answer: `status`, and the API's `code`, `message` and `details`."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: Any = None,
        *,
        retry_after: float | None = None,
        method: str = "",
        path: str = "",
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.retry_after = retry_after
        self.method = method
        self.path = path


class BadRequestError(APIError):
    """400: the body could not be parsed."""


class AuthenticationError(APIError):
    """401: missing, unknown or revoked API key."""


class PermissionDeniedError(APIError):
    """403: the key's role does not allow this operation."""


class NotFoundError(APIError):
    """404: no such memory, file or repository in this tenant."""


class ConflictError(APIError):
    """409: e.g. an idempotency_key already used for a different write."""


class PayloadTooLargeError(APIError):
    """413: a body or field over its limit, or the tenant's storage quota reached."""


class InvalidRequestError(APIError):
    """422: invalid input; `details` lists each problem (loc, msg, type)."""


class RateLimitError(APIError):
    """429: the key is over its rate limit (raised once the client's retries are spent)."""


class ServiceUnavailableError(APIError):
    """503: the database is unavailable or busy for a moment (raised once retries are spent)."""


class ServerError(APIError):
    """Any other 5xx."""


_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: InvalidRequestError,
    429: RateLimitError,
    503: ServiceUnavailableError,
}


def error_from_response(response: httpx.Response, retry_after: float | None = None) -> APIError:
    """The exception for an error answer; bodies not in recalld's shape (a proxy's page) keep their text."""
    status = response.status_code
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else APIError)
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        code, message, details = error["code"], str(error.get("message", "")), error.get("details")
    else:
        code, message, details = f"http_{status}", response.text[:500] or response.reason_phrase, None
    return cls(
        status,
        code,
        message,
        details,
        retry_after=retry_after,
        method=response.request.method,
        path=response.request.url.path,
    )
