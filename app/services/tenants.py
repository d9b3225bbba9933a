"""Tenants and API keys: authentication, administration and the first-start bootstrap."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import asyncpg

from app.auth import KEY_PATTERN, KEY_PREFIX, Principal, Role, hash_key, mint_key
from app.db import Database
from app.errors import ApiError
from app.repositories import tenants as repo
from app.repositories.tenants import Tenant
from app.secret_files import write_secret
from app.services.vector_indexes import drop_tenant_index

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
    """Delete a tenant with its keys and data, and its HNSW index (conn: the owner's, no transaction)."""
    await repo.delete_tenant(conn, tenant_id=tenant_id)
    await drop_tenant_index(conn, tenant_id=tenant_id)


async def create_key(conn: asyncpg.Connection, *, tenant: str, role: Role, operator: bool) -> str:
    """Mint and store a key for a tenant by name; returns the plain key (shown once)."""
    found = await tenant_by_name(conn, tenant)
    key = mint_key()
    await repo.insert_api_key(
        conn, tenant_id=found.id, prefix=key.prefix, key_hash=key.key_hash, role=role, operator=operator
    )
    return key.plain


async def revoke_key(conn: asyncpg.Connection, key_or_prefix: str, *, tenant: str | None) -> None:
    """Revoke exactly one live key: the whole key, or its prefix within one tenant.

    A 32-bit prefix alone could name keys of several tenants; it never revokes across them.
    """
    if KEY_PATTERN.fullmatch(key_or_prefix):
        if not await repo.revoke_key_by_hash(conn, key_hash=hash_key(key_or_prefix)):
            raise ApiError(404, "not_found", "no live key matches the given key")
        return
    if tenant is None:
        raise ApiError(
            422,
            "validation_error",
            "a prefix names a key only within its tenant: pass --tenant NAME, or give the whole key",
        )
    found = await tenant_by_name(conn, tenant)
    prefix = key_or_prefix.removeprefix(KEY_PREFIX).split("_")[0]
    count = await repo.count_live_keys_by_prefix(conn, tenant_id=found.id, prefix=prefix)
    if count == 0:
        raise ApiError(404, "not_found", f"no live key of tenant {tenant!r} has the prefix {prefix!r}")
    if count > 1:
        raise ApiError(
            409,
            "conflict",
            f"{count} live keys of tenant {tenant!r} share the prefix {prefix!r}; give the whole key",
        )
    await repo.revoke_keys_by_prefix(conn, tenant_id=found.id, prefix=prefix)


async def bootstrap(conn: asyncpg.Connection, admin_key_path: Path) -> str | None:
    """On a database without tenants: create `default` and an admin key, saved 0600 at admin_key_path."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _BOOTSTRAP_LOCK)
        if await repo.count_tenants(conn) > 0:
            return None
        await repo.create_tenant(conn, name="default")
        plain = await create_key(conn, tenant="default", role="admin", operator=False)
        # Saved before the commit: a crash after it must not leave a tenant whose only admin key
        # nobody has. A crash before it leaves a file with an unknown key, and the next start
        # bootstraps (and replaces the file) again.
        await asyncio.to_thread(write_secret, admin_key_path, plain + "\n")
    return plain


async def resolve_tenants(
    db: Database, principal: Principal, tenants: Sequence[str] | None, all_tenants: bool
) -> list[str]:
    """The caller's tenant, or, for operator keys that ask for it, the requested tenants."""
    if not tenants and not all_tenants:
        return [principal.tenant_id]
    if not principal.operator:
        raise ApiError(403, "forbidden", "cross-tenant retrieval needs an operator key")
    # Through a SECURITY DEFINER function: the serving role cannot read the tenant table, and
    # the function lists tenants only for a live operator key.
    names = None if all_tenants else list(tenants or ())
    async with db.connection() as conn:
        found = await repo.operator_tenants(
            conn, tenant_id=principal.tenant_id, key_id=principal.key_id, names=names
        )
    if all_tenants:
        return [t.id for t in found]
    assert tenants is not None
    missing = sorted(set(tenants) - {t.name for t in found})
    if missing:
        raise ApiError(404, "not_found", f"unknown tenant {missing[0]}", {"missing": missing})
    return [t.id for t in found]
