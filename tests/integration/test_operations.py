"""Operating under bugs and load: keep-alive after a 500, redacted logs, 503 instead of waiting forever."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from app.infra.config import Settings
from app.main import create_app
from app.state import ServiceState
from tests.support import TenantFactory, free_port, served

SECRET_INPUT = "the user's private words 7731"


@pytest.fixture
async def served_app(settings: Settings, app: FastAPI) -> AsyncIterator[str]:
    """A real uvicorn server (as `recalld serve` builds it) with a test-only route that fails."""
    # Not about semantics: keyword-only keeps the extra app start fast.
    own = settings.model_copy(update={"embedding_provider": "none", "port": free_port()})
    application = create_app(own)

    @application.get("/test-only/boom")
    async def boom() -> None:  # test-only: stands for any bug that escapes a route
        raise RuntimeError(SECRET_INPUT)

    async with served(application, own) as address:
        yield address


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = {
        name.strip().lower(): value.strip()
        for name, _, value in (line.partition(":") for line in header_lines if line)
    }
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return int(status_line.split()[1]), headers, body


async def test_a_500_keeps_the_keep_alive_connection_usable(served_app: str) -> None:
    host, port = served_app.split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"GET /test-only/boom HTTP/1.1\r\nHost: recalld\r\n\r\n")
        status, headers, body = await _read_response(reader)
        assert status == 500
        assert b'"internal_error"' in body
        if headers.get("connection") == "close":
            return  # also correct: the client was told not to reuse the connection
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: recalld\r\n\r\n")
        next_status, _, _ = await asyncio.wait_for(_read_response(reader), 10)
        assert next_status == 200
    finally:
        writer.close()


async def test_logs_carry_neither_query_strings_nor_exception_messages(
    served_app: str, caplog: pytest.LogCaptureFixture
) -> None:
    access_lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            access_lines.append(record.getMessage())

    collector = Collect()
    # uvicorn's access logger does not propagate; listen on it directly.
    logging.getLogger("uvicorn.access").addHandler(collector)
    try:
        async with httpx.AsyncClient(base_url=f"http://{served_app}") as http:
            assert (await http.get("/healthz", params={"api_key": "rk_0badc0de_pasted"})).status_code == 200
            with caplog.at_level(logging.ERROR, logger="recalld"):
                assert (await http.get("/test-only/boom", params={"q": SECRET_INPUT})).status_code == 500
    finally:
        logging.getLogger("uvicorn.access").removeHandler(collector)
    assert any("/healthz" in line for line in access_lines)
    assert not any("rk_0badc0de" in line or "api_key" in line for line in access_lines), access_lines
    assert "unhandled error on GET /test-only/boom" in caplog.text
    assert "RuntimeError" in caplog.text  # the type and the frames stay, for debugging
    assert SECRET_INPUT not in caplog.text
    assert "7731" not in caplog.text


async def test_a_starved_pool_answers_503_and_readyz_still_answers(
    settings: Settings, app: FastAPI, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant("starved")
    # Not about semantics: keyword-only keeps the extra app start fast.
    small = settings.model_copy(
        update={
            "embedding_provider": "none",
            "pool_min_size": 1,
            "pool_max_size": 1,
            "pool_acquire_timeout": 0.3,
        }
    )
    application = create_app(small)
    async with application.router.lifespan_context(application):
        state: ServiceState = application.state.service
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://recalld.test") as http:
            async with state.pool.acquire():  # a slow request holds the only connection
                starved = await asyncio.wait_for(
                    http.get(f"/v1/memories/{uuid.uuid4()}", headers=tenant.headers("reader")), 10
                )
                ready = await asyncio.wait_for(http.get("/readyz"), 10)
            assert starved.status_code == 503
            assert starved.json()["error"]["code"] == "database_unavailable"
            assert int(starved.headers["retry-after"]) > 0
            assert ready.status_code == 200
            # Once the connection is back, the same request is served normally.
            after = await http.get(f"/v1/memories/{uuid.uuid4()}", headers=tenant.headers("reader"))
            assert after.status_code == 404
