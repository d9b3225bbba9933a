"""What the tests share: tenants' keys, the search call, free ports, real servers started and awaited."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from app.cli.admin import build_server
from app.infra.config import Settings

ROOT = Path(__file__).resolve().parent.parent
# A first start initialises PostgreSQL and exports the model: 280 s on a two-core machine shared by
# eight test suites (load average 24), where 90 s failed every server test.
READY_SECONDS = 300


@dataclass(frozen=True, slots=True)
class TenantKeys:
    """A test tenant and one key per role."""

    name: str
    id: str
    reader: str
    writer: str
    admin: str

    def headers(self, role: str = "writer") -> dict[str, str]:
        """Authorization header for the key of `role`."""
        return {"Authorization": f"Bearer {getattr(self, role)}"}


TenantFactory = Callable[..., Awaitable[TenantKeys]]


async def search(client: httpx.AsyncClient, tenant: TenantKeys, **body: Any) -> dict[str, Any]:
    """POST /v1/search as the tenant's reader; the answer must be a 200, its JSON is returned."""
    response = await client.post("/v1/search", json=body, headers=tenant.headers("reader"))
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_ready(port: int, process: subprocess.Popen[str]) -> None:
    """Until the `recalld serve` process on port answers /readyz with 200 (READY_SECONDS at most)."""
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError("recalld did not become ready")


@asynccontextmanager
async def running(application: FastAPI) -> AsyncIterator[FastAPI]:
    """The app with its lifespan entered and left by one task of its own.

    The MCP session manager's task group must be exited by the task that entered it, and
    pytest-asyncio runs a fixture's setup and its teardown in different tasks.
    """
    started = asyncio.Event()
    stop = asyncio.Event()

    async def serve() -> None:
        async with application.router.lifespan_context(application):
            started.set()
            await stop.wait()

    task = asyncio.create_task(serve())
    ready = asyncio.create_task(started.wait())
    await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
    ready.cancel()
    if task.done():
        task.result()  # the lifespan failed to start: raise its error here
    try:
        yield application
    finally:
        stop.set()
        await task


@asynccontextmanager
async def served(application: FastAPI, settings: Settings) -> AsyncIterator[str]:
    """The application behind a real uvicorn server as `recalld serve` builds it, at settings.port."""
    server = build_server(application, settings)
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "uvicorn did not start"
        await asyncio.sleep(0.05)
    try:
        yield f"127.0.0.1:{settings.port}"
    finally:
        server.should_exit = True
        await task


def failing_first(
    original: Callable[..., Awaitable[Any]], exc: Exception, times: int
) -> Callable[..., Awaitable[Any]]:
    """A stand-in for an async repository function that raises `exc` on its first `times` calls, then is the original."""
    calls = 0

    async def failing(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls <= times:
            raise exc
        return await original(*args, **kwargs)

    return failing
