"""JSON error answers sent straight over ASGI, by the middleware that runs outside FastAPI's handlers."""

from __future__ import annotations

from starlette.types import Send


async def send_json_error(send: Send, status: int, body: bytes, *, close: bool = False) -> None:
    """Send a whole JSON response: status, Content-Type and Content-Length, then the body.

    close=True adds `Connection: close`, for answers sent before the request body was read.
    """
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
