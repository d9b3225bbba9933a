"""One embedded PostgreSQL and one app per test session, with the real MiniLM model."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from fastapi import FastAPI

from app.auth import Role, mint_key
from app.infra.config import Settings
from app.infra.db import connect, resolve_dsn, resolve_serving_dsn
from app.main import create_app
from app.repositories import tenants as tenant_repo
from app.state import ServiceState
from tests.support import TenantFactory, TenantKeys, running

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def data_dir() -> Iterator[Path]:
    # Short path: the server's Unix socket lives in it and socket paths are limited to ~100 chars.
    path = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def settings(data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir, database_url=None, pool_min_size=1, pool_max_size=5)


@pytest.fixture(scope="session")
async def app(settings: Settings) -> AsyncIterator[FastAPI]:
    async with running(create_app(settings)) as application:
        yield application


@pytest.fixture(scope="session")
def service(app: FastAPI) -> ServiceState:
    state: ServiceState = app.state.service
    return state


@pytest.fixture(scope="session")
async def dsn(app: FastAPI, settings: Settings) -> str:
    return await resolve_dsn(settings)


@pytest.fixture(scope="session")
async def serving_dsn(dsn: str, settings: Settings) -> str:
    """The serving role's DSN, as the app logs in."""
    return await resolve_serving_dsn(settings, dsn)


@pytest.fixture
async def serving_conn(serving_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection as the serving role, outside any transaction wrapper (RLS tests)."""
    conn = await connect(serving_dsn)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def admin_conn(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """A superuser connection, for setup that the API cannot do (and for RLS tests)."""
    conn = await connect(dsn)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://recalld.test") as http:
        yield http


@pytest.fixture
async def make_tenant(dsn: str) -> TenantFactory:
    """Create a fresh tenant with reader, writer and admin keys."""

    async def create(prefix: str = "t", operator: bool = False) -> TenantKeys:
        conn = await connect(dsn)
        try:
            tenant = await tenant_repo.create_tenant(conn, name=f"{prefix}-{uuid.uuid4().hex[:10]}")
            keys: dict[str, str] = {}
            roles: tuple[Role, ...] = ("reader", "writer", "admin")
            for role in roles:
                key = mint_key()
                await tenant_repo.insert_api_key(
                    conn,
                    tenant_id=tenant.id,
                    prefix=key.prefix,
                    key_hash=key.key_hash,
                    role=role,
                    operator=operator,
                )
                keys[role] = key.plain
            return TenantKeys(name=tenant.name, id=tenant.id, **keys)
        finally:
            await conn.close()

    return create
