"""RLS fails closed: the service logs in as a role that row-level security binds (SPEC R-T4, R-T6)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import asyncpg
import httpx
import pytest

from app.infra.config import Settings
from app.infra.db import connect, with_login
from app.infra.embedded_pg import with_database
from app.infra.migrate import upgrade_to_head
from app.main import create_app
from app.startup import StartupError
from app.state import ServiceState
from tests.support import TenantFactory


async def test_every_table_with_tenant_id_has_forced_row_level_security_and_a_policy(
    admin_conn: asyncpg.Connection,
) -> None:
    rows = await admin_conn.fetch(
        """
        SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
               (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid) AS policies
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
        ORDER BY c.relname
        """
    )
    tables = {r["relname"] for r in rows}
    assert {"api_key", "memory", "document", "code_file", "keyword_posting"} <= tables
    unprotected = [
        r["relname"]
        for r in rows
        if not (r["relrowsecurity"] and r["relforcerowsecurity"] and r["policies"] > 0)
    ]
    assert unprotected == []


async def test_the_service_logs_in_as_a_role_rls_binds(service: ServiceState) -> None:
    async with service.pool.acquire() as conn:
        role = await conn.fetchrow(
            "SELECT current_user AS name, r.rolsuper, r.rolbypassrls, "
            "pg_has_role(current_user, c.relowner, 'MEMBER') AS owner "
            "FROM pg_roles r, pg_class c WHERE r.rolname = current_user AND c.oid = 'memory'::regclass"
        )
    assert role is not None
    assert (role["rolsuper"], role["rolbypassrls"], role["owner"]) == (False, False, False)


async def test_outside_the_transaction_wrapper_the_service_role_sees_no_tenant_data(
    client: httpx.AsyncClient, make_tenant: TenantFactory, service: ServiceState
) -> None:
    a = await make_tenant("a")
    stored = await client.post("/v1/facts", json={"content": "a private fact"}, headers=a.headers())
    assert stored.status_code == 201
    async with service.pool.acquire() as conn:
        # No tenant_transaction, no set_config: a forgotten wrapper must fail closed.
        for table in (
            "memory",
            "memory_vector",
            "keyword_posting",
            "keyword_block",
            "document",
            "code_file",
            "scope_settings",
        ):
            assert await conn.fetchval(f"SELECT count(*) FROM {table}") == 0, table
        assert await conn.fetchval("SELECT count(*) FROM tenant") == 0
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.fetch("SELECT * FROM api_key")
        # Authentication answers for the one key it is given, and nothing else.
        assert await conn.fetch("SELECT * FROM recalld_authenticate($1)", b"\x00" * 32) == []
        found = await client.get(f"/v1/memories/{stored.json()['id']}", headers=a.headers("reader"))
        assert found.status_code == 200


async def test_only_a_live_operator_key_can_list_tenants(
    make_tenant: TenantFactory, serving_conn: asyncpg.Connection, admin_conn: asyncpg.Connection
) -> None:
    plain = await make_tenant("plain")
    operator = await make_tenant("op", operator=True)
    key_ids = {
        str(r["tenant_id"]): str(r["id"])
        for r in await admin_conn.fetch(
            "SELECT tenant_id, id FROM api_key WHERE tenant_id = ANY($1::uuid[]) AND role = 'reader'",
            [uuid.UUID(plain.id), uuid.UUID(operator.id)],
        )
    }
    listing = "SELECT name FROM recalld_operator_tenants($1, $2, $3::text[])"
    names = [plain.name, operator.name]
    assert await serving_conn.fetch(listing, uuid.UUID(plain.id), uuid.UUID(key_ids[plain.id]), names) == []
    rows = await serving_conn.fetch(listing, uuid.UUID(operator.id), uuid.UUID(key_ids[operator.id]), names)
    assert sorted(r["name"] for r in rows) == sorted(names)


async def test_serving_as_a_superuser_or_the_owner_is_refused(
    dsn: str, admin_conn: asyncpg.Connection, data_dir: Path
) -> None:
    name = f"own_{uuid.uuid4().hex[:8]}"
    owner_role = f"owner_{uuid.uuid4().hex[:8]}"
    # CREATE DATABASE/ROLE take no parameters; the names are generated here, not user input.
    await admin_conn.execute(f'CREATE DATABASE "{name}"')
    await admin_conn.execute(f"CREATE ROLE {owner_role} LOGIN")
    try:
        superuser_url = with_database(dsn, name)
        await asyncio.to_thread(upgrade_to_head, superuser_url)
        conn = await connect(superuser_url)
        try:
            await conn.execute(f"ALTER TABLE memory OWNER TO {owner_role}")
            await conn.execute(f"GRANT SELECT ON alembic_version, system_config TO {owner_role}")
        finally:
            await conn.close()
        owner_url = with_login(superuser_url, owner_role, "")
        for url, why in ((superuser_url, "a superuser"), (owner_url, "the owner of recalld's tables")):
            # Not about semantics: keyword-only keeps the app start fast.
            settings = Settings(data_dir=data_dir, database_url=url, embedding_provider="none")
            app = create_app(settings)
            with pytest.raises(StartupError, match=f"refusing to serve as database role .*{why}"):
                async with app.router.lifespan_context(app):
                    pass
    finally:
        await admin_conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin_conn.execute(f"DROP ROLE IF EXISTS {owner_role}")
