"""Request bodies capped before anything parses them or looks at the key (pure ASGI).

Without it a client with no key could send 256 MB and the server buffered all of it, parsed it
and only then answered 401. Here a declared Content-Length over the cap is refused before one
body byte is read, and a chunked body is refused as soon as it passes the cap; the connection is
then closed, since the unread rest of the body cannot be skipped cheaply.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import error_body
from app.web.asgi_json import send_json_error

# The operations whose bodies carry whole files or many memories get the upload cap.
UPLOAD_ROUTES = frozenset(
    {
        ("PUT", "/v1/documents"),
        ("PUT", "/v1/code/files"),
        ("POST", "/v1/memories:batch"),
        ("POST", "/mcp"),
    }
)


def _mib(limit: int) -> str:
    return f"{limit / (1024 * 1024):g} MiB"


class BodyLimitMiddleware:
    """Answers 413 for bodies over the cap of their route; hands the app the buffered body."""

    def __init__(self, app: ASGIApp, *, default_limit: int, upload_limit: int) -> None:
        self.app = app
        self.default_limit = default_limit
        self.upload_limit = upload_limit

    def limit_for(self, scope: Scope) -> int:
        """The cap for this request's method and path."""
        route = (scope["method"], scope["path"].rstrip("/") or "/")
        return self.upload_limit if route in UPLOAD_ROUTES else self.default_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope)
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _refuse(send, limit)
            return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client is gone: there is nobody to answer
            body += message.get("body", b"")
            if len(body) > limit:
                await _refuse(send, limit)
                return
            more = message.get("more_body", False)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()  # later calls wait for the disconnect, as they would have

        await self.app(scope, replay, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(send: Send, limit: int) -> None:
    payload = json.dumps(
        error_body(
            "payload_too_large",
            f"request body is larger than {_mib(limit)} ({limit} bytes), the limit of this operation",
            {"limit_bytes": limit},
        )
    ).encode()
    # The unread rest of the body cannot be skipped cheaply: the connection ends with this answer.
    await send_json_error(send, 413, payload, close=True)
