"""Tenants and API keys: authentication, administration and the first-start bootstrap."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import asyncpg

from app.auth import Principal, Role, hash_key, mint_key
from app.errors import ApiError
from app.repositories import tenants as repo
from app.repositories.tenants import Tenant

# Serialises concurrent first starts on one database, so only one creates the default tenant.
_BOOTSTRAP_LOCK = 72410002
TENANT_NAME_RULE = "letters, digits, '_', '.', '-' (max 64)"


async def authenticate(conn: asyncpg.Connection, plain_key: str) -> Principal | None:
    """The principal of a live key, or None for an unknown or revoked one."""
    return await repo.find_principal_by_hash(conn, key_hash=hash_key(plain_key))


async def create_tenant(conn: asyncpg.Connection, name: str) -> Tenant:
    """A new tenant; 409 when the name is taken, 422 when it breaks the naming rule."""
    try:
        return await repo.create_tenant(conn, name=name)
    except asyncpg.UniqueViolationError as exc:
        raise ApiError(409, "conflict", f"tenant {name!r} already exists") from exc
    except asyncpg.CheckViolationError as exc:
        raise ApiError(422, "validation_error", f"invalid tenant name {name!r}: {TENANT_NAME_RULE}") from exc


async def list_tenants(conn: asyncpg.Connection) -> list[Tenant]:
    """Every tenant, by name."""
    return await repo.list_tenants(conn)


async def tenant_by_name(conn: asyncpg.Connection, name: str) -> Tenant:
    """The tenant called name; 404 when there is none."""
    found = await repo.get_tenant_by_name(conn, name=name)
    if found is None:
        raise ApiError(
            404, "not_found", f"no tenant named {name!r} (create it with `recalld tenants create {name}`)"
        )
    return found


async def delete_tenant(conn: asyncpg.Connection, tenant_id: str) -> None:
    """Delete a tenant with its keys and data."""
    await repo.delete_tenant(conn, tenant_id=tenant_id)


async def create_key(conn: asyncpg.Connection, *, tenant: str, role: Role, operator: bool) -> str:
    """Mint and store a key for a tenant by name; returns the plain key (shown once)."""
    found = await tenant_by_name(conn, tenant)
    key = mint_key()
    await repo.insert_api_key(
        conn, tenant_id=found.id, prefix=key.prefix, key_hash=key.key_hash, role=role, operator=operator
    )
    return key.plain


async def revoke_keys(conn: asyncpg.Connection, key_or_prefix: str) -> int:
    """Revoke the live keys with this prefix (or of this whole key); 404 when there is none."""
    prefix = key_or_prefix.removeprefix("rk_").split("_")[0]
    count = await repo.revoke_keys_by_prefix(conn, prefix=prefix)
    if count == 0:
        raise ApiError(404, "not_found", f"no live key with prefix {key_or_prefix!r}")
    return count


async def bootstrap(conn: asyncpg.Connection, admin_key_path: Path) -> str | None:
    """On a database without tenants: create `default` and an admin key, saved 0600 at admin_key_path."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _BOOTSTRAP_LOCK)
        if await repo.count_tenants(conn) > 0:
            return None
        await repo.create_tenant(conn, name="default")
        plain = await create_key(conn, tenant="default", role="admin", operator=False)
    admin_key_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(admin_key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(plain + "\n")
    os.chmod(admin_key_path, 0o600)
    return plain


async def resolve_tenants(
    conn: asyncpg.Connection, principal: Principal, tenants: Sequence[str] | None, all_tenants: bool
) -> list[str]:
    """The caller's tenant, or, for operator keys that ask for it, the requested tenants."""
    if not tenants and not all_tenants:
        return [principal.tenant_id]
    if not principal.operator:
        raise ApiError(403, "forbidden", "cross-tenant retrieval needs an operator key")
    if all_tenants:
        return [t.id for t in await repo.list_tenants(conn)]
    assert tenants is not None
    found = await repo.get_tenants_by_names(conn, names=list(tenants))
    missing = sorted(set(tenants) - {t.name for t in found})
    if missing:
        raise ApiError(404, "not_found", f"unknown tenant {missing[0]}", {"missing": missing})
    return [t.id for t in found]
