"""SQL for tenants and API keys.

The admin commands run these as the schema owner. The serving role sees only its own tenant row
and no api_key row (migration 0011): it authenticates and resolves operator tenants through two
SECURITY DEFINER functions.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

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


async def operator_tenants(
    conn: asyncpg.Connection, *, tenant_id: str, key_id: str, names: list[str] | None
) -> list[Tenant]:
    """Tenants an operator key may address (all, or those named), by name; none for other keys."""
    rows = await conn.fetch(
        "SELECT id, name FROM recalld_operator_tenants($1, $2, $3::text[])",
        uuid.UUID(tenant_id),
        uuid.UUID(key_id),
        names,
    )
    return [Tenant(id=str(r["id"]), name=r["name"]) for r in rows]


async def list_tenants(conn: asyncpg.Connection) -> list[Tenant]:
    """All tenants, by name."""
    rows = await conn.fetch("SELECT id, name FROM tenant ORDER BY name")
    return [Tenant(id=str(r["id"]), name=r["name"]) for r in rows]


@dataclass(frozen=True, slots=True)
class TenantSummary:
    """A tenant with what an operator checks first: its age, size and live keys."""

    id: str
    name: str
    created_at: datetime
    memories: int
    bytes: int
    live_keys: int


async def list_tenant_summaries(conn: asyncpg.Connection) -> list[TenantSummary]:
    """Every tenant with its memory count, stored bytes and live keys, by name."""
    rows = await conn.fetch(
        """
        SELECT t.id, t.name, t.created_at, coalesce(u.memories, 0) AS memories, coalesce(u.bytes, 0) AS bytes,
               (SELECT count(*) FROM api_key k WHERE k.tenant_id = t.id AND k.revoked_at IS NULL
                  AND (k.expires_at IS NULL OR k.expires_at > now())) AS live_keys
        FROM tenant t LEFT JOIN tenant_usage u ON u.tenant_id = t.id
        ORDER BY t.name
        """
    )
    return [
        TenantSummary(
            id=str(r["id"]),
            name=r["name"],
            created_at=r["created_at"],
            memories=r["memories"],
            bytes=r["bytes"],
            live_keys=r["live_keys"],
        )
        for r in rows
    ]


async def count_tenants(conn: asyncpg.Connection) -> int:
    """How many tenants exist (bootstrap runs when none do)."""
    count: int = await conn.fetchval("SELECT count(*) FROM tenant")
    return count


async def insert_api_key(
    conn: asyncpg.Connection,
    *,
    tenant_id: str,
    prefix: str,
    key_hash: bytes,
    role: Role,
    operator: bool,
    expires_at: datetime | None = None,
) -> str:
    """Store a key's hash; returns the key id."""
    key_id = uuid.uuid4()
    await conn.execute(
        "INSERT INTO api_key (tenant_id, id, prefix, key_hash, role, operator, expires_at) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7)",
        uuid.UUID(tenant_id),
        key_id,
        prefix,
        key_hash,
        role,
        operator,
        expires_at,
    )
    return str(key_id)


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """An API key as an operator sees it: never its hash."""

    tenant_id: str
    tenant_name: str
    id: str
    prefix: str
    role: Role
    operator: bool
    created_at: datetime
    last_used_at: datetime | None
    expires_at: datetime | None
    revoked_at: datetime | None


_KEY_COLUMNS = (
    "k.tenant_id, t.name AS tenant_name, k.id, k.prefix, k.role, k.operator, k.created_at, "
    "k.last_used_at, k.expires_at, k.revoked_at"
)


def _key_info(row: asyncpg.Record) -> KeyInfo:
    return KeyInfo(**{**dict(row), "tenant_id": str(row["tenant_id"]), "id": str(row["id"])})


async def list_keys(conn: asyncpg.Connection, *, tenant_id: str | None) -> list[KeyInfo]:
    """Every key (of one tenant, or all), by tenant name, then age."""
    rows = await conn.fetch(
        f"SELECT {_KEY_COLUMNS} FROM api_key k JOIN tenant t ON t.id = k.tenant_id "
        "WHERE $1::uuid IS NULL OR k.tenant_id = $1 ORDER BY t.name, k.created_at, k.id",
        uuid.UUID(tenant_id) if tenant_id else None,
    )
    return [_key_info(r) for r in rows]


async def live_keys_matching(
    conn: asyncpg.Connection, *, key_hash: bytes | None, prefix: str | None, tenant_id: str | None
) -> list[KeyInfo]:
    """Live keys with this hash, or this prefix (within one tenant when given), locked for update."""
    rows = await conn.fetch(
        f"SELECT {_KEY_COLUMNS} FROM api_key k JOIN tenant t ON t.id = k.tenant_id "
        "WHERE ($1::bytea IS NULL OR k.key_hash = $1) AND ($2::text IS NULL OR k.prefix = $2) "
        "AND ($3::uuid IS NULL OR k.tenant_id = $3) "
        "AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now()) "
        "ORDER BY k.created_at FOR UPDATE OF k",
        key_hash,
        prefix,
        uuid.UUID(tenant_id) if tenant_id else None,
    )
    return [_key_info(r) for r in rows]


async def end_key_at(conn: asyncpg.Connection, *, tenant_id: str, key_id: str, at: datetime) -> None:
    """Make a key expire at `at`, or keep its earlier expiry."""
    await conn.execute(
        "UPDATE api_key SET expires_at = LEAST(coalesce(expires_at, $3), $3) WHERE tenant_id = $1 AND id = $2",
        uuid.UUID(tenant_id),
        uuid.UUID(key_id),
        at,
    )


async def find_principal_by_hash(conn: asyncpg.Connection, *, key_hash: bytes) -> Principal | None:
    """The principal of a live (neither revoked nor expired) key; records its use once a minute."""
    row = await conn.fetchrow(
        "SELECT tenant_id, tenant_name, key_id, role, operator FROM recalld_authenticate($1)", key_hash
    )
    if row is None:
        return None
    return Principal(
        tenant_id=str(row["tenant_id"]),
        tenant_name=row["tenant_name"],
        key_id=str(row["key_id"]),
        role=row["role"],
        operator=row["operator"],
    )


async def revoke_key_by_hash(conn: asyncpg.Connection, *, key_hash: bytes) -> bool:
    """Revoke the live key with this hash; False when there is none."""
    result: str = await conn.execute(
        "UPDATE api_key SET revoked_at = now() WHERE key_hash = $1 AND revoked_at IS NULL", key_hash
    )
    return result != "UPDATE 0"


async def count_live_keys_by_prefix(conn: asyncpg.Connection, *, tenant_id: str, prefix: str) -> int:
    """How many live keys of one tenant have this prefix."""
    count: int = await conn.fetchval(
        "SELECT count(*) FROM api_key WHERE tenant_id = $1 AND prefix = $2 AND revoked_at IS NULL",
        uuid.UUID(tenant_id),
        prefix,
    )
    return count


async def revoke_keys_by_prefix(conn: asyncpg.Connection, *, tenant_id: str, prefix: str) -> int:
    """Revoke the live keys of one tenant whose prefix matches; returns how many."""
    result: str = await conn.execute(
        "UPDATE api_key SET revoked_at = now() WHERE tenant_id = $1 AND prefix = $2 AND revoked_at IS NULL",
        uuid.UUID(tenant_id),
        prefix,
    )
    return int(result.split()[-1])


async def delete_tenant(conn: asyncpg.Connection, *, tenant_id: str) -> None:
    """Delete a tenant; its keys and data go with it (ON DELETE CASCADE)."""
    await conn.execute("DELETE FROM tenant WHERE id = $1::uuid", tenant_id)
