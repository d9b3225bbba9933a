"""SQL for tenants and API keys (the global registry; no RLS, see migration 0001)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg

from app.auth import Principal, Role


@dataclass(frozen=True, slots=True)
class Tenant:
    """A tenant row."""

    id: str
    name: str


async def create_tenant(conn: asyncpg.Connection, *, name: str) -> Tenant:
    """Insert a tenant; raises asyncpg.UniqueViolationError when the name is taken."""
    row = await conn.fetchrow(
        "INSERT INTO tenant (id, name) VALUES ($1, $2) RETURNING id, name", uuid.uuid4(), name
    )
    assert row is not None
    return Tenant(id=str(row["id"]), name=row["name"])


async def get_tenant_by_name(conn: asyncpg.Connection, *, name: str) -> Tenant | None:
    """The tenant called name, if any."""
    row = await conn.fetchrow("SELECT id, name FROM tenant WHERE name = $1", name)
    return Tenant(id=str(row["id"]), name=row["name"]) if row else None


async def get_tenants_by_names(conn: asyncpg.Connection, *, names: list[str]) -> list[Tenant]:
    """Tenants with the given names (unknown names are left out)."""
    rows = await conn.fetch("SELECT id, name FROM tenant WHERE name = ANY($1::text[]) ORDER BY name", names)
    return [Tenant(id=str(r["id"]), name=r["name"]) for r in rows]


async def list_tenants(conn: asyncpg.Connection) -> list[Tenant]:
    """All tenants, by name."""
    rows = await conn.fetch("SELECT id, name FROM tenant ORDER BY name")
    return [Tenant(id=str(r["id"]), name=r["name"]) for r in rows]


async def count_tenants(conn: asyncpg.Connection) -> int:
    """How many tenants exist (bootstrap runs when none do)."""
    count: int = await conn.fetchval("SELECT count(*) FROM tenant")
    return count


async def insert_api_key(
    conn: asyncpg.Connection, *, tenant_id: str, prefix: str, key_hash: bytes, role: Role, operator: bool
) -> str:
    """Store a key's hash; returns the key id."""
    key_id = uuid.uuid4()
    await conn.execute(
        "INSERT INTO api_key (tenant_id, id, prefix, key_hash, role, operator) VALUES ($1, $2, $3, $4, $5, $6)",
        uuid.UUID(tenant_id),
        key_id,
        prefix,
        key_hash,
        role,
        operator,
    )
    return str(key_id)


async def find_principal_by_hash(conn: asyncpg.Connection, *, key_hash: bytes) -> Principal | None:
    """The principal of a live (not revoked) key."""
    row = await conn.fetchrow(
        "SELECT k.tenant_id, t.name AS tenant_name, k.id, k.role, k.operator "
        "FROM api_key k JOIN tenant t ON t.id = k.tenant_id "
        "WHERE k.key_hash = $1 AND k.revoked_at IS NULL",
        key_hash,
    )
    if row is None:
        return None
    return Principal(
        tenant_id=str(row["tenant_id"]),
        tenant_name=row["tenant_name"],
        key_id=str(row["id"]),
        role=row["role"],
        operator=row["operator"],
    )


async def revoke_keys_by_prefix(conn: asyncpg.Connection, *, prefix: str) -> int:
    """Revoke every live key whose prefix matches; returns how many."""
    result: str = await conn.execute(
        "UPDATE api_key SET revoked_at = now() WHERE prefix = $1 AND revoked_at IS NULL", prefix
    )
    return int(result.split()[-1])


async def delete_tenant(conn: asyncpg.Connection, *, tenant_id: str) -> None:
    """Delete a tenant; its keys and data go with it (ON DELETE CASCADE)."""
    await conn.execute("DELETE FROM tenant WHERE id = $1::uuid", tenant_id)
