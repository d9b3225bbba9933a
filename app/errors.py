"""One JSON error shape everywhere: {"error": {"code", "message", "details"}}; no web framework here.

ApiError is raised from every layer (retrieval's pure functions included); app.web.http_errors turns
it, and what FastAPI, Starlette and the database raise, into responses.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError


class ApiError(Exception):
    """An error the client caused or should know about, with its HTTP status."""

    def __init__(
        self, status: int, code: str, message: str, details: Any = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.headers = headers


def not_found(what: str = "memory") -> ApiError:
    """The 404 used for missing ids and for ids of other tenants alike."""
    return ApiError(404, "not_found", f"{what} not found")


def model_error_details(exc: ValidationError) -> list[dict[str, Any]]:
    """loc/msg/type of each problem, as for request bodies; never the input, which may not be JSON."""
    return [
        {"loc": [str(part) for part in err["loc"]], "msg": err["msg"], "type": err["type"]}
        for err in exc.errors(include_url=False, include_input=False, include_context=False)
    ]


def invalid_input(details: list[dict[str, Any]]) -> ApiError:
    """The 422 for input that fails validation, a field too long included.

    413 is the body-size cap's alone (before parsing, R-I4a): a field over its length is a
    value the client can fix in place, like any other invalid value.
    """
    first = details[0] if details else {"loc": [], "msg": "invalid request"}
    where = ".".join(p for p in first["loc"] if p != "body") or "request"
    message = str(first["msg"]) if first.get("type") == "json_invalid" else f"{where}: {first['msg']}"
    return ApiError(422, "validation_error", message, details)


def is_json_media_type(media_type: str) -> bool:
    """application/json or any +json type."""
    return media_type == "application/json" or media_type.endswith("+json")


def unsupported_media_type(media_type: str, details: Any = None) -> ApiError:
    """The 415 for a body that was not sent as JSON."""
    return ApiError(
        415,
        "unsupported_media_type",
        f"send the body as JSON with 'Content-Type: application/json' (got {media_type or 'none'!r})",
        details,
    )


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    """The JSON body of every error response."""
    return {"error": {"code": code, "message": message, "details": details}}


INTERNAL_ERROR_BODY = json.dumps(error_body("internal_error", "internal server error")).encode()
