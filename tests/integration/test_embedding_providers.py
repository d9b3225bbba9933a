"""Models of any dimension over the OpenAI-compatible API: storage sized at first start, mismatches refused,
retries and outages. The endpoint is tests/embedding_stub.py, a labelled TEST DOUBLE (not about semantics)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import httpx
import psutil
import pytest

from app.auth import mint_key
from app.infra.config import Settings
from app.infra.db import connect, resolve_dsn
from app.infra.embedded_pg import with_database
from app.main import create_app
from app.repositories import tenants as tenant_repo
from app.services.vector_indexes import sweep
from app.startup import StartupError
from app.state import ServiceState
from tests.embedding_stub import embedding_stub
from tests.support import ROOT, TenantFactory, free_port, running

FACTS = [
    "The heron nests by the Ohrid lake every spring",
    "Invoices are sent on the first Monday of the month",
    "The staging database password rotates weekly",
    "Our deploys freeze on Friday afternoons",
]


def _kill_postgres(path: Path) -> None:
    pid_file = path / "pg" / "postmaster.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text().split()[0])
        if psutil.pid_exists(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def fresh_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="re-", dir="/tmp"))
    yield path
    _kill_postgres(path)
    shutil.rmtree(path, ignore_errors=True)


async def _writer_key(settings: Settings) -> str:
    conn = await connect(await resolve_dsn(settings))
    try:
        tenant = await tenant_repo.create_tenant(conn, name=f"emb-{uuid.uuid4().hex[:8]}")
        key = mint_key()
        await tenant_repo.insert_api_key(
            conn, tenant_id=tenant.id, prefix=key.prefix, key_hash=key.key_hash, role="writer", operator=False
        )
        return key.plain
    finally:
        await conn.close()


@pytest.fixture
async def stub_768() -> AsyncIterator[tuple[str, object]]:
    with embedding_stub(768) as served:
        yield served


@pytest.mark.parametrize(("dim", "column"), [(768, "vector(768)"), (3072, "halfvec(3072)")])
async def test_a_fresh_data_directory_takes_the_providers_dimension_and_answers_every_mode(
    fresh_dir: Path, dim: int, column: str, admin_conn: asyncpg.Connection
) -> None:
    with embedding_stub(dim) as (url, stub):
        settings = Settings(
            data_dir=fresh_dir,
            database_url=None,
            embedding_provider="openai",
            embedding_model=f"stub-{dim}",
            openai_base_url=url,
            openai_api_key="sk-test-secret",
            pool_min_size=1,
            pool_max_size=3,
            exact_scan_max_rows=3,  # the tenant below gets its own HNSW index
            vector_index_check_seconds=3600,  # only the sweep below builds it
        )
        # RECALLD_EMBEDDING_DIM unset: the first start asks the endpoint (one request).
        async with running(create_app(settings)) as app:
            state: ServiceState = app.state.service
            assert state.embedder is not None and state.embedder.identity.dim == dim
            key = await _writer_key(settings)
            headers = {"Authorization": f"Bearer {key}"}
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://recalld.test") as http:
                ready = (await http.get("/readyz")).json()["checks"]["embedder"]
                assert ready["dim"] == dim and ready["model"] == f"stub-{dim}"
                ids = {}
                for fact in FACTS:
                    stored = await http.post("/v1/facts", json={"content": fact}, headers=headers)
                    assert stored.status_code == 201, stored.text
                    ids[fact] = stored.json()["id"]
                # The near-duplicate probe compares vectors of the column's type (halfvec past 2,000):
                # the same words with a comma inside are not the same content, but close (R-M7).
                near = await http.post(
                    "/v1/facts",
                    json={"content": "The heron nests by the Ohrid lake, every spring"},
                    headers=headers,
                )
                assert near.status_code == 201, near.text
                assert [s["id"] for s in near.json()["similar_to"]] == [ids[FACTS[0]]]
                assert near.json()["similar_to"][0]["similarity"] >= 0.99
                await http.delete(f"/v1/memories/{near.json()['id']}", headers=headers)
                owner = await connect(await resolve_dsn(settings))
                try:
                    assert (
                        await owner.fetchval(
                            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                            "WHERE attrelid = 'memory'::regclass AND attname = 'embedding'"
                        )
                        == column
                    )
                    # The update trigger was made again as the migrations left it (0019: restorable).
                    trigger = (
                        "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'memory_vector_update'"
                    )
                    assert await owner.fetchval(trigger) == await admin_conn.fetchval(trigger)
                    # Searched by the exact scan first, then through the tenant's own HNSW index
                    # (built with the operator class of the column's type).
                    for leg in ("exact", "index"):
                        if leg == "index":
                            built = await sweep(owner, min_rows=3, cache=state.vector_indexes)
                            assert len(built.built) == 1
                        for mode in ("semantic", "hybrid"):
                            answer = await http.post(
                                "/v1/search",
                                json={"query": "where does the heron nest", "mode": mode, "limit": 2},
                                headers=headers,
                            )
                            assert answer.status_code == 200, answer.text
                            assert answer.json()["embedding_used"] is True
                            assert answer.json()["results"][0]["id"] == ids[FACTS[0]]
                finally:
                    await owner.close()
                # Document chunks and code chunks are embedded by the same model, into the same columns.
                document = {
                    "path": "notes/birds.md",
                    "content": "# Birds\n\nThe quetzalcoatlus flew over Tirana.",
                }
                assert (await http.put("/v1/documents", json=document, headers=headers)).status_code == 200
                code = {
                    "repository": "svc",
                    "files": [
                        {
                            "path": "keys.py",
                            "content": "def rotate_api_key(tenant):\n    return new_key(tenant)\n",
                        }
                    ],
                }
                assert (await http.put("/v1/code/files", json=code, headers=headers)).status_code == 200
                for types, query, path in (
                    (["document"], "quetzalcoatlus over Tirana", "notes/birds.md"),
                    (["code"], "rotate api key", "keys.py"),
                ):
                    answer = await http.post(
                        "/v1/search",
                        json={"query": query, "mode": "semantic", "types": types},
                        headers=headers,
                    )
                    assert answer.status_code == 200, answer.text
                    assert answer.json()["embedding_used"] is True
                    assert answer.json()["results"][0]["path"] == path
        # The key went to the endpoint as a bearer token, and every request named the model.
        assert set(stub.authorizations) == {"Bearer sk-test-secret"}
        assert {r["model"] for r in stub.requests} == {f"stub-{dim}"}


def _serve(data_dir: Path, port: int, env: dict[str, str]) -> subprocess.Popen[str]:
    full = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    full.update(RECALLD_DATA_DIR=str(data_dir), HF_HUB_OFFLINE="1", **env)
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
        cwd=ROOT,
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_serve_at_1536_stores_and_searches_and_a_start_with_another_model_is_one_line(
    fresh_dir: Path,
) -> None:
    with embedding_stub(1536) as (url, _):
        env = {
            "RECALLD_EMBEDDING_PROVIDER": "openai",
            "RECALLD_EMBEDDING_MODEL": "text-embedding-3-small",
            "RECALLD_EMBEDDING_DIM": "1536",
            "RECALLD_OPENAI_BASE_URL": url,
        }
        port = free_port()
        server = _serve(fresh_dir, port, env)
        try:
            deadline = time.monotonic() + 120
            while True:
                assert server.poll() is None and time.monotonic() < deadline, server.communicate()
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.3)
            headers = {"Authorization": f"Bearer {(fresh_dir / 'admin.key').read_text().strip()}"}
            base = f"http://127.0.0.1:{port}"
            stored = httpx.post(f"{base}/v1/facts", json={"content": FACTS[0]}, headers=headers)
            assert stored.status_code == 201, stored.text
            httpx.post(f"{base}/v1/facts", json={"content": FACTS[1]}, headers=headers)
            for mode in ("semantic", "hybrid"):
                answer = httpx.post(
                    f"{base}/v1/search", json={"query": "heron nests", "mode": mode}, headers=headers
                ).json()
                assert answer["embedding_used"] is True
                assert answer["results"][0]["id"] == stored.json()["id"]
        finally:
            server.send_signal(signal.SIGTERM)
            server.communicate(timeout=60)

        again = _serve(fresh_dir, free_port(), {**env, "RECALLD_EMBEDDING_DIM": "768"})
        stdout, stderr = again.communicate(timeout=120)
        assert again.returncode == 1
        assert "listening" not in stdout
        assert "Traceback" not in stderr
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert lines == [lines[-1]] and lines[0].startswith("recalld: this database holds embeddings of"), (
            stderr
        )
        assert (
            "RECALLD_EMBEDDING_PROVIDER=openai RECALLD_EMBEDDING_MODEL=text-embedding-3-small "
            "RECALLD_EMBEDDING_DIM=1536" in lines[0]
        )


async def test_a_provider_outage_degrades_searches_and_refuses_writes_with_503(
    fresh_dir: Path, stub_768: tuple[str, object]
) -> None:
    url, stub = stub_768
    settings = Settings(
        data_dir=fresh_dir,
        database_url=None,
        embedding_provider="openai",
        embedding_model="stub-768",
        embedding_dim=768,
        openai_base_url=url,
        embedding_max_retries=2,
        pool_min_size=1,
        pool_max_size=3,
    )
    async with running(create_app(settings)) as app:
        key = await _writer_key(settings)
        headers = {"Authorization": f"Bearer {key}"}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://recalld.test") as http:
            kept = await http.post("/v1/facts", json={"content": FACTS[0]}, headers=headers)
            assert kept.status_code == 201
            # Two 429s then success: the write is retried with backoff and succeeds.
            stub.failures, stub.failure_status, stub.retry_after = 2, 429, "0.1"  # type: ignore[attr-defined]
            retried = await http.post("/v1/facts", json={"content": FACTS[1]}, headers=headers)
            assert retried.status_code == 201, retried.text

            stub.failures, stub.failure_status = -1, 503  # type: ignore[attr-defined]
            refused = await http.post("/v1/facts", json={"content": FACTS[2]}, headers=headers)
            assert refused.status_code == 503
            assert refused.headers["Retry-After"].isdigit()
            assert refused.json()["error"]["code"] == "embedding_unavailable"
            batch = await http.post(
                "/v1/memories:batch",
                json={"items": [{"type": "fact", "content": FACTS[3]}]},
                headers=headers,
            )
            assert batch.status_code == 503, batch.text
            answer = await http.post(
                "/v1/search", json={"query": "heron Ohrid lake", "mode": "hybrid"}, headers=headers
            )
            assert answer.status_code == 200
            assert answer.json()["embedding_used"] is False
            assert [r["id"] for r in answer.json()["results"]] == [kept.json()["id"]]

            stub.failures = 0  # type: ignore[attr-defined]
            listed = await http.get("/v1/memories", params={"type": "fact"}, headers=headers)
            contents = sorted(item["content"] for item in listed.json()["items"])
            # Nothing of the refused writes was stored.
            assert contents == sorted([FACTS[0], FACTS[1]])


async def test_the_dimensions_field_is_sent_when_asked_the_key_can_come_from_a_file_and_v1_is_found(
    fresh_dir: Path, stub_768: tuple[str, object]
) -> None:
    url, stub = stub_768
    key_file = fresh_dir / "openai.key"
    key_file.write_text("sk-from-file\n")
    settings = Settings(
        data_dir=fresh_dir / "d",
        database_url=None,
        embedding_provider="openai",
        embedding_model="text-embedding-3-large",
        embedding_dim=256,
        embedding_send_dimensions=True,
        openai_base_url=url.removesuffix("/v1"),  # given without its /v1, as users often do
        openai_api_key_file=key_file,
    )
    from app.embeddings.factory import build_embedder

    embedder = build_embedder(settings)
    assert embedder is not None
    try:
        vectors = await embedder.embed_documents(["one text", "another text"])
    finally:
        embedder.close()
    assert [len(v) for v in vectors] == [256, 256]
    assert stub.requests[-1]["dimensions"] == 256  # type: ignore[attr-defined]
    assert stub.authorizations[-1] == "Bearer sk-from-file"  # type: ignore[attr-defined]
    assert "sk-from-file" not in repr(settings)


async def test_an_existing_minilm_database_keeps_serving_and_refuses_a_768_model(
    app: object, settings: Settings, admin_conn: asyncpg.Connection
) -> None:
    # The session database was started with the local model: recorded as such, columns vector(384).
    recorded = await admin_conn.fetchval("SELECT value FROM system_config WHERE key = 'embedding'")
    assert recorded in ({"provider": "local", "model": "all-MiniLM-L6-v2", "dim": 384},)
    with embedding_stub(768) as (url, _):
        other = settings.model_copy(
            update={
                "embedding_provider": "openai",
                "embedding_model": "nomic-embed-text",
                "openai_base_url": url,
            }
        )
        application = create_app(other)
        with pytest.raises(StartupError) as refused:
            async with application.router.lifespan_context(application):
                pass
    assert "RECALLD_EMBEDDING_PROVIDER=local" in str(refused.value)
    assert (
        await admin_conn.fetchval(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'memory_vector'::regclass AND attname = 'embedding'"
        )
        == "vector(384)"
    )


async def _migrate(env: dict[str, str]) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "migrate", cwd=ROOT, env=env, stderr=asyncio.subprocess.PIPE
    )
    _, stderr = await process.communicate()
    assert process.returncode == 0, stderr.decode()


async def test_an_external_database_is_sized_by_migrate_and_served_by_the_serving_role(
    dsn: str, serving_dsn: str, admin_conn: asyncpg.Connection, data_dir: Path
) -> None:
    name = f"ext_{uuid.uuid4().hex[:8]}"
    await admin_conn.execute(f'CREATE DATABASE "{name}"')  # a generated name, not user input
    owner, external = with_database(dsn, name), with_database(serving_dsn, name)
    serving_password = Settings(data_dir=data_dir).serving_password_path.read_text().strip()
    try:
        with embedding_stub(768) as (url, _):
            env = {
                "DATABASE_URL": external,
                "RECALLD_MIGRATION_DATABASE_URL": owner,
                "RECALLD_SERVING_PASSWORD": serving_password,
                "HF_HUB_OFFLINE": "1",
                "PATH": "/usr/bin:/bin",
            }
            await _migrate({**env, "RECALLD_EMBEDDING_PROVIDER": "none"})
            settings = Settings(
                data_dir=data_dir,
                database_url=external,
                embedding_provider="openai",
                embedding_model="stub-768",
                embedding_dim=768,
                openai_base_url=url,
                pool_min_size=1,
                pool_max_size=2,
            )
            # The serving role may not resize the columns: the message names the command that does.
            refused = create_app(settings)
            with pytest.raises(StartupError, match="run `recalld migrate` with this RECALLD_EMBEDDING_"):
                async with refused.router.lifespan_context(refused):
                    pass
            await _migrate(
                {
                    **env,
                    "RECALLD_EMBEDDING_PROVIDER": "openai",
                    "RECALLD_EMBEDDING_MODEL": "stub-768",
                    "RECALLD_EMBEDDING_DIM": "768",
                    "RECALLD_OPENAI_BASE_URL": url,
                }
            )
            async with running(create_app(settings)) as app:
                state: ServiceState = app.state.service
                assert state.embedder is not None and state.embedder.identity.dim == 768
            conn = await connect(owner)
            try:
                assert await conn.fetchval("SELECT value FROM system_config WHERE key = 'embedding'") == {
                    "provider": "openai",
                    "model": "stub-768",
                    "dim": 768,
                }
            finally:
                await conn.close()
    finally:
        await admin_conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def test_embeddings_status_shows_the_recorded_model_the_columns_and_the_vectors(
    app: object, data_dir: Path, make_tenant: TenantFactory, client: httpx.AsyncClient
) -> None:
    tenant = await make_tenant("status")
    assert (
        await client.post("/v1/facts", json={"content": "one"}, headers=tenant.headers())
    ).status_code == 201
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(RECALLD_DATA_DIR=str(data_dir), HF_HUB_OFFLINE="1")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "app.cli",
        "embeddings",
        "status",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await process.communicate()
    assert process.returncode == 0, stderr.decode()
    lines = stdout.decode().splitlines()
    assert lines[:2] == ["model: local/all-MiniLM-L6-v2, 384 dimensions", "columns: vector(384)"]
    total, embedded = (int(n) for n in re.findall(r"\d+", lines[2]))
    assert lines[2].startswith("memories: ") and total >= embedded >= 1
