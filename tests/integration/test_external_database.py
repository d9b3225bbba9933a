"""Startup refusals: a DATABASE_URL schema behind head (until `recalld migrate`), another embedding model."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import asyncpg
import httpx
import pytest

from app.infra.config import Settings
from app.infra.embedded_pg import with_database
from app.main import create_app
from app.startup import StartupError

ROOT = Path(__file__).resolve().parents[2]


async def test_unmigrated_database_is_refused_until_recalld_migrate(
    dsn: str, serving_dsn: str, admin_conn: asyncpg.Connection, data_dir: Path
) -> None:
    name = f"ext_{uuid.uuid4().hex[:8]}"
    # CREATE DATABASE takes no parameters; the name is generated above, not user input.
    await admin_conn.execute(f'CREATE DATABASE "{name}"')
    # An operator's two URLs: the owner migrates, the serving role serves.
    owner = with_database(dsn, name)
    external = with_database(serving_dsn, name)
    # The role is cluster-wide: migrate must keep the password the session's server uses.
    serving_password = Settings(data_dir=data_dir).serving_password_path.read_text().strip()
    try:
        # Not about semantics: keyword-only keeps the app start fast.
        settings = Settings(
            data_dir=data_dir,
            database_url=external,
            embedding_provider="none",
            pool_min_size=1,
            pool_max_size=2,
        )
        app = create_app(settings)
        with pytest.raises(StartupError, match="run `recalld migrate` against this DATABASE_URL first"):
            async with app.router.lifespan_context(app):
                pass

        migrate = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "app.cli",
            "migrate",
            cwd=ROOT,
            env={
                "DATABASE_URL": external,
                "RECALLD_MIGRATION_DATABASE_URL": owner,
                "RECALLD_SERVING_PASSWORD": serving_password,
                "HF_HUB_OFFLINE": "1",
                "PATH": "/usr/bin:/bin",
            },
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await migrate.communicate()
        assert migrate.returncode == 0, stderr.decode()
        assert stdout.decode() == "database schema is at head\n"

        app = create_app(settings)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://recalld.test") as http:
                ready = await http.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["status"] == "ready"
        assert ready.json()["checks"]["embedder"] == {"provider": "none", "loaded": False}
    finally:
        await admin_conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def test_another_embedding_model_on_the_same_database_is_refused(
    app: object, settings: Settings
) -> None:
    # The `app` fixture started the session's database with MiniLM; an OpenAI-compatible model of the same size
    # would silently mix incomparable vectors. No request is sent: startup must stop first.
    other = settings.model_copy(
        update={
            "embedding_provider": "openai",
            "embedding_model": "nomic-embed-text",
            "openai_base_url": "http://127.0.0.1:9/v1",
        }
    )
    application = create_app(other)
    with pytest.raises(StartupError) as refused:
        async with application.router.lifespan_context(application):
            pass
    assert "this database holds embeddings of {'provider': 'local', 'model': 'all-MiniLM-L6-v2'" in str(
        refused.value
    )
    assert "'model': 'nomic-embed-text'" in str(refused.value)
