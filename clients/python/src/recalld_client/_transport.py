"""Sending one call with the client's retries, for Client and AsyncClient, streamed answers included.

429 and 503 answers are resent after their Retry-After, failed connections as `Settings` decides. A
streamed answer is returned open (the caller closes it) once its status says success; an error
answer is read whole first, so that its message can be raised.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from recalld_client._core import Call, Settings, check, transport_error


def _request(http: httpx.Client | httpx.AsyncClient, settings: Settings, call: Call) -> httpx.Request:
    return http.build_request(
        call.method,
        settings.base_url + call.path,
        params=call.params,
        json=call.json,
        content=call.content,
        headers={**settings.headers(), **(call.headers or {})},
        timeout=settings.timeout,
    )


def send(http: httpx.Client, settings: Settings, call: Call, *, stream: bool = False) -> httpx.Response:
    """The call's successful answer, after the retries its failures allow; else the APIError it stands for."""
    attempt = 0
    while True:
        try:
            response = http.send(_request(http, settings, call), stream=stream)
        except httpx.TransportError as exc:
            delay = settings.transport_retry_delay(attempt, call, exc)
            if delay is None:
                raise transport_error(settings, call, exc) from exc
        else:
            if response.is_success:
                return response
            response.read()
            response.close()
            delay = settings.retry_delay(attempt, response)
            if delay is None:
                return check(response)
        time.sleep(delay)
        attempt += 1


async def asend(
    http: httpx.AsyncClient, settings: Settings, call: Call, *, stream: bool = False
) -> httpx.Response:
    """`send` for AsyncClient."""
    attempt = 0
    while True:
        try:
            response = await http.send(_request(http, settings, call), stream=stream)
        except httpx.TransportError as exc:
            delay = settings.transport_retry_delay(attempt, call, exc)
            if delay is None:
                raise transport_error(settings, call, exc) from exc
        else:
            if response.is_success:
                return response
            await response.aread()
            await response.aclose()
            delay = settings.retry_delay(attempt, response)
            if delay is None:
                return check(response)
        await asyncio.sleep(delay)
        attempt += 1
