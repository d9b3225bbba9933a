"""The one HTTP middleware: request latency per route, NUL characters in URLs refused, the model gate held.

Written against ASGI directly: Starlette's BaseHTTPMiddleware runs every request through extra
tasks and a wrapped body stream, which cost more than a whole keyword search.
"""

from __future__ import annotations

import json
import time
from contextlib import AbstractAsyncContextManager, nullcontext

from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import INTERNAL_ERROR_BODY, error_body
from app.metrics import REQUEST_LATENCY
from app.model_gate import ModelGate
from app.web.asgi_json import send_json_error
from app.web.http_errors import log_unexpected

_NUL_BODY = json.dumps(error_body("validation_error", "the URL contains a NUL character (%00)")).encode()


def _has_nul(scope: Scope) -> bool:
    # Bodies are checked by the models; a %00 in a path or query parameter would reach
    # PostgreSQL (which cannot store U+0000) and surface as a 500.
    query: bytes = scope.get("query_string", b"")
    return "\x00" in scope.get("path", "") or b"%00" in query or b"\x00" in query


def _model_held(scope: Scope) -> AbstractAsyncContextManager[None]:
    """The embedding model's gate for a request that may embed or compare vectors (any but GET/HEAD)."""
    state = getattr(getattr(scope.get("app"), "state", None), "service", None)
    if state is None or scope["method"] in ("GET", "HEAD", "OPTIONS"):
        return nullcontext()
    gate: ModelGate = state.model_gate
    return gate.use()


class RequestMiddleware:
    """Observes latency by route template and status; answers 422 for a NUL in the URL."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _has_nul(scope):
            await send_json_error(send, 422, _NUL_BODY)
            return
        started = time.perf_counter()
        status = 500
        response_started = False

        async def send_observed(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                status = message["status"]
                response_started = True
            await send(message)

        try:
            async with _model_held(scope):
                await self.app(scope, receive, send_observed)
        except Exception as exc:
            # Answered here instead of by Starlette's ServerErrorMiddleware, which re-raises after
            # its 500: the server then drops the keep-alive connection under the client's next
            # request. Handled here, the connection stays usable.
            log_unexpected(scope["method"], scope["path"], exc)
            if response_started:
                raise  # half a response is out; only closing the connection can end it
            await send_json_error(send_observed, 500, INTERNAL_ERROR_BODY)
        finally:
            route = scope.get("route")
            template = route.path if isinstance(route, Route) else "unmatched"
            REQUEST_LATENCY.labels(scope["method"], template, str(status)).observe(
                time.perf_counter() - started
            )
