"""The FastAPI side of the error shape: exception handlers, the 503 answers, logging of bugs."""

from __future__ import annotations

import logging
from typing import Any

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from app.embeddings.base import EmbeddingUnavailable
from app.errors import ApiError, error_body, invalid_input, is_json_media_type, unsupported_media_type
from app.infra.db import UNAVAILABLE_ERRORS
from app.redaction import describe_exception

log = logging.getLogger("recalld.errors")

# How long a client should wait after a 503: the supervisor polls twice a second and PostgreSQL's
# crash recovery takes a few seconds; the pool reconnects on the next request.
RETRY_AFTER_SECONDS = 2
# After an embedding outage: the provider already failed its retries with backoff (seconds).
EMBEDDING_RETRY_AFTER_SECONDS = 10

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "too_many_requests",
    503: "not_ready",
}


def request_media_type(request: Request) -> str:
    """The request's Content-Type without parameters, lower case; empty when none was sent."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


_METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")


def allowed_methods(request: Request) -> str:
    """The Allow header of a 405: every method some route takes at this path, not only the first's.

    Asked of the router one method at a time: included routers match lazily and list no methods.
    """
    routes = request.app.router.routes
    allowed = [
        method
        for method in _METHODS
        if any(route.matches({**request.scope, "method": method})[0] == Match.FULL for route in routes)
    ]
    return ", ".join(allowed)


def unavailable_response() -> JSONResponse:
    """503 + Retry-After: the database cannot serve right now; the request changed nothing."""
    return JSONResponse(
        error_body(
            "database_unavailable",
            "the database is unavailable right now; retry after the Retry-After delay",
        ),
        status_code=503,
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


def log_unexpected(method: str, path: str, exc: BaseException) -> None:
    """Log a bug without the query string or exception messages (they can carry user input)."""
    log.error("unhandled error on %s %s\n%s", method, path, describe_exception(exc))


def _validation_details(exc: RequestValidationError) -> list[dict[str, Any]]:
    details = []
    for err in exc.errors():
        msg = str(err.get("msg", ""))
        if err.get("type") == "json_invalid":
            # FastAPI puts the character offset where a field name would be; say it in words.
            position = err.get("loc", ("body", "?"))[-1]
            reason = err.get("ctx", {}).get("error", "malformed")
            msg = f"request body is not valid JSON: {reason} at character {position}"
        details.append(
            {
                "loc": [str(part) for part in err.get("loc", ())],
                "msg": msg,
                "type": str(err.get("type", "")),
            }
        )
    return details


def install_error_handlers(app: FastAPI) -> None:
    """Route every error FastAPI or recalld raises through error_body."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(
            error_body(exc.code, exc.message, exc.details), status_code=exc.status, headers=exc.headers
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, "http_error")
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 405:
            headers["Allow"] = allowed_methods(request)
        return JSONResponse(error_body(code, str(exc.detail)), status_code=exc.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        details = _validation_details(exc)
        media_type = request_media_type(request)
        body_not_json = not is_json_media_type(media_type)
        if body_not_json and any(d["loc"] == ["body"] for d in details):
            # curl -d without a Content-Type header sends form encoding: the JSON is never parsed.
            error = unsupported_media_type(media_type, details)
            return JSONResponse(error_body(error.code, error.message, details), status_code=error.status)
        error = invalid_input(details)
        return JSONResponse(error_body(error.code, error.message, details), status_code=error.status)

    async def _unavailable(request: Request, exc: Exception) -> JSONResponse:
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path, type(exc).__name__)
        return unavailable_response()

    for error_class in UNAVAILABLE_ERRORS:
        app.add_exception_handler(error_class, _unavailable)

    async def _collided(request: Request, exc: Exception) -> JSONResponse:
        # Database.run retried the unit of work and it collided every time: nothing was stored.
        log.warning(
            "transaction kept colliding on %s %s: %s", request.method, request.url.path, type(exc).__name__
        )
        return JSONResponse(
            error_body("database_busy", "concurrent writes kept colliding; nothing was stored, retry"),
            status_code=503,
            headers={"Retry-After": "1"},
        )

    app.add_exception_handler(asyncpg.TransactionRollbackError, _collided)

    async def _embedding_unavailable(request: Request, exc: Exception) -> JSONResponse:
        # A write whose text could not be embedded rolled back: nothing was stored. Searches never
        # get here (they rank by keyword alone, embedding_used false).
        log.warning("embedding provider unavailable on %s %s: %s", request.method, request.url.path, exc)
        return JSONResponse(
            error_body(
                "embedding_unavailable",
                "the embedding provider cannot embed right now; nothing was stored, retry after the "
                "Retry-After delay",
            ),
            status_code=503,
            headers={"Retry-After": str(EMBEDDING_RETRY_AFTER_SECONDS)},
        )

    app.add_exception_handler(EmbeddingUnavailable, _embedding_unavailable)
