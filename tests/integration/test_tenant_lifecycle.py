"""Tenant and key lifecycle through the admin CLI, seen through the HTTP API."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import httpx
import pytest

from app.auth import KEY_PATTERN, hash_key
from tests.integration.test_admin_cli import _recalld
from tests.support import TenantFactory
from tests.tenant_content import fill

pytestmark = pytest.mark.usefixtures("app")


async def _status(client: httpx.AsyncClient, key: str) -> int:
    response = await client.get(
        "/v1/memories", params={"type": "fact"}, headers={"Authorization": f"Bearer {key}"}
    )
    return response.status_code


async def _rows_of(conn: asyncpg.Connection, tenant_id: str) -> dict[str, int]:
    """Rows of the tenant in every table that has a tenant_id (whatever later migrations add)."""
    tables = await conn.fetch(
        "SELECT table_name FROM information_schema.columns WHERE table_schema = 'public' "
        "AND column_name = 'tenant_id' AND table_name IN "
        "(SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE') ORDER BY 1"
    )
    counts = {}
    for table in tables:
        # Catalogue names, quoted: no user input reaches this statement.
        name = table["table_name"]
        counts[name] = await conn.fetchval(
            f'SELECT count(*) FROM "{name}" WHERE tenant_id = $1::uuid', tenant_id
        )
    return counts


async def test_deleting_a_tenant_removes_every_row_and_its_keys_answer_401_at_once(
    client: httpx.AsyncClient, make_tenant: TenantFactory, admin_conn: asyncpg.Connection, data_dir: Path
) -> None:
    doomed = await make_tenant("doomed")
    kept = await make_tenant("kept")
    await fill(client, doomed)
    await fill(client, kept)
    assert await _status(client, doomed.reader) == 200
    held = await _rows_of(admin_conn, doomed.id)
    assert held["memory"] > 0 and held["document"] == 1 and held["code_file"] == 2 and held["api_key"] == 3
    kept_before = await _rows_of(admin_conn, kept.id)

    code, output = await _recalld(data_dir, "tenants", "delete", doomed.name)
    assert code == 1 and "--yes" in output
    assert await _status(client, doomed.reader) == 200

    code, output = await _recalld(data_dir, "tenants", "delete", doomed.name, "--yes")
    assert code == 0, output
    assert f"deleted tenant '{doomed.name}'" in output
    for key in (doomed.reader, doomed.writer, doomed.admin):
        assert await _status(client, key) == 401
    assert set((await _rows_of(admin_conn, doomed.id)).values()) == {0}
    assert await admin_conn.fetchval("SELECT count(*) FROM tenant WHERE id = $1::uuid", doomed.id) == 0
    # The other tenant keeps everything.
    assert await _rows_of(admin_conn, kept.id) == kept_before
    assert await _status(client, kept.reader) == 200

    code, listing = await _recalld(data_dir, "tenants", "list")
    assert code == 0
    names = [line.split("\t")[0] for line in listing.splitlines()[1:]]
    assert kept.name in names and doomed.name not in names
    code, output = await _recalld(data_dir, "tenants", "delete", doomed.name, "--yes")
    assert code == 1 and "no tenant named" in output


def _printed_key(output: str) -> str:
    keys = [line for line in output.splitlines() if KEY_PATTERN.fullmatch(line)]
    assert len(keys) == 1, output
    return keys[0]


def _key_line(listing: str, key: str) -> dict[str, str]:
    header, *lines = listing.splitlines()
    prefix = "_".join(key.split("_")[:2])
    found = [dict(zip(header.split("\t"), line.split("\t"), strict=True)) for line in lines]
    matching = [row for row in found if row["PREFIX"] == prefix]
    assert len(matching) == 1, listing
    return matching[0]


async def test_keys_list_shows_role_creation_and_last_use_never_the_key(
    client: httpx.AsyncClient, make_tenant: TenantFactory, data_dir: Path
) -> None:
    tenant = await make_tenant("keys")
    code, listing = await _recalld(data_dir, "keys", "list", "--tenant", tenant.name)
    assert code == 0, listing
    row = _key_line(listing, tenant.writer)
    assert row["ROLE"] == "writer" and row["LAST_USED"] == "-" and row["STATUS"] == "live"
    assert row["TENANT"] == tenant.name and row["CREATED"].endswith("Z")
    assert tenant.writer not in listing and len(listing.splitlines()) == 4

    assert await _status(client, tenant.writer) == 200
    code, listing = await _recalld(data_dir, "keys", "list")
    assert _key_line(listing, tenant.writer)["LAST_USED"].endswith("Z")
    assert _key_line(listing, tenant.reader)["LAST_USED"] == "-"


async def test_expired_keys_answer_401(
    client: httpx.AsyncClient, make_tenant: TenantFactory, admin_conn: asyncpg.Connection, data_dir: Path
) -> None:
    tenant = await make_tenant("expiry")
    code, key = await _recalld(
        data_dir, "keys", "create", "--tenant", tenant.name, "--role", "reader", "--expires-in", "30d"
    )
    assert code == 0, key
    key = key.strip()
    assert await _status(client, key) == 200
    code, listing = await _recalld(data_dir, "keys", "list", "--tenant", tenant.name)
    assert _key_line(listing, key)["EXPIRES"].endswith("Z")

    # Time passes: the expiry is moved into the past rather than waited for.
    await admin_conn.execute(
        "UPDATE api_key SET expires_at = now() - interval '1 second' WHERE key_hash = $1", hash_key(key)
    )
    assert await _status(client, key) == 401
    code, listing = await _recalld(data_dir, "keys", "list", "--tenant", tenant.name)
    assert _key_line(listing, key)["STATUS"] == "expired"

    code, output = await _recalld(
        data_dir,
        "keys",
        "create",
        "--tenant",
        tenant.name,
        "--role",
        "reader",
        "--expires-at",
        "2001-01-01T00:00Z",
    )
    assert code == 1 and "not in the future" in output
    code, output = await _recalld(
        data_dir, "keys", "create", "--tenant", tenant.name, "--role", "reader", "--expires-in", "soon"
    )
    assert code == 2 and "duration" in output


async def test_rotation_keeps_the_old_key_valid_for_the_grace_period_only(
    client: httpx.AsyncClient, make_tenant: TenantFactory, admin_conn: asyncpg.Connection, data_dir: Path
) -> None:
    tenant = await make_tenant("rotate")
    prefix = "_".join(tenant.admin.split("_")[:2])
    code, output = await _recalld(data_dir, "keys", "rotate", prefix, "--grace", "1h")
    assert code == 0, output
    new = _printed_key(output)
    assert new.startswith("rk_") and new != tenant.admin
    assert "stays valid until" in output
    # Both work during the grace period; the new key has the old one's tenant and role.
    for key in (tenant.admin, new):
        assert await _status(client, key) == 200
    code, listing = await _recalld(data_dir, "keys", "list", "--tenant", tenant.name)
    assert _key_line(listing, tenant.admin)["EXPIRES"] != "-"
    assert _key_line(listing, new)["ROLE"] == "admin" and _key_line(listing, new)["EXPIRES"] == "-"
    assert _key_line(listing, new)["TENANT"] == tenant.name

    # The grace period ends: the old key answers 401, the new one goes on.
    await admin_conn.execute(
        "UPDATE api_key SET expires_at = now() - interval '1 second' WHERE key_hash = $1",
        hash_key(tenant.admin),
    )
    assert await _status(client, tenant.admin) == 401
    assert await _status(client, new) == 200

    # Without a grace period the old key stops at once; an expired key cannot be rotated.
    code, output = await _recalld(data_dir, "keys", "rotate", new, "--grace", "0s")
    assert code == 0, output
    assert await _status(client, new) == 401
    assert await _status(client, _printed_key(output)) == 200
    code, output = await _recalld(data_dir, "keys", "rotate", new)
    assert code == 1 and "no live key" in output
