"""Tenants and API keys: authentication, administration and the first-start bootstrap."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg

from app.auth import KEY_PATTERN, KEY_PREFIX, Principal, Role, hash_key, mint_key
from app.errors import ApiError
from app.infra.db import Database
from app.infra.secret_files import write_secret
from app.repositories import tenants as repo
from app.repositories.tenants import KeyInfo, Tenant, TenantSummary
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


async def tenant_summaries(conn: asyncpg.Connection) -> list[TenantSummary]:
    """Every tenant with its memory count, bytes and live keys, by name."""
    return await repo.list_tenant_summaries(conn)


async def delete_tenant(conn: asyncpg.Connection, tenant_id: str) -> None:
    """Delete a tenant with its keys and data, and its HNSW index (conn: the owner's, no transaction)."""
    # One statement: every row of every tenant table and the usage counters go by ON DELETE
    # CASCADE, and the keys with them, so authentication (which reads api_key on every request,
    # nothing is cached) refuses them from the commit on.
    await repo.delete_tenant(conn, tenant_id=tenant_id)
    await drop_tenant_index(conn, tenant_id=tenant_id)


async def delete_tenant_by_name(conn: asyncpg.Connection, name: str) -> TenantSummary:
    """Delete the tenant called name with everything it holds; returns what it held. 404 if none."""
    found = next((t for t in await repo.list_tenant_summaries(conn) if t.name == name), None)
    if found is None:
        raise ApiError(404, "not_found", f"no tenant named {name!r}")
    await delete_tenant(conn, found.id)
    return found


def _future(expires_at: datetime | None) -> datetime | None:
    if expires_at is None:
        return None
    if expires_at.tzinfo is None:
        expires_at = expires_at.replace(tzinfo=UTC)
    if expires_at <= datetime.now(UTC):
        raise ApiError(422, "validation_error", f"the expiry {expires_at.isoformat()} is not in the future")
    return expires_at


async def create_key(
    conn: asyncpg.Connection,
    *,
    tenant: str,
    role: Role,
    operator: bool,
    expires_at: datetime | None = None,
) -> str:
    """Mint and store a key for a tenant by name; returns the plain key (shown once)."""
    found = await tenant_by_name(conn, tenant)
    key = mint_key()
    await repo.insert_api_key(
        conn,
        tenant_id=found.id,
        prefix=key.prefix,
        key_hash=key.key_hash,
        role=role,
        operator=operator,
        expires_at=_future(expires_at),
    )
    return key.plain


async def list_keys(conn: asyncpg.Connection, *, tenant: str | None) -> list[KeyInfo]:
    """Every key, or one tenant's, with its use and lifetime (never its hash)."""
    tenant_id = (await tenant_by_name(conn, tenant)).id if tenant is not None else None
    return await repo.list_keys(conn, tenant_id=tenant_id)


def key_status(key: KeyInfo, now: datetime) -> str:
    """live, expired or revoked."""
    if key.revoked_at is not None:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= now:
        return "expired"
    return "live"


@dataclass(frozen=True, slots=True)
class Rotation:
    """A rotated key: the new plain key (shown once), and until when the old one still works."""

    plain: str
    old: KeyInfo
    old_valid_until: datetime


async def rotate_key(
    conn: asyncpg.Connection,
    key_or_prefix: str,
    *,
    tenant: str | None,
    grace: timedelta,
    expires_at: datetime | None = None,
) -> Rotation:
    """Replace a live key by a new one of the same tenant and role; the old one works for `grace` more.

    A prefix must name exactly one live key (within --tenant when given); a whole key always does.
    """
    if grace < timedelta(0):
        raise ApiError(422, "validation_error", "the grace period cannot be negative")
    new_expiry = _future(expires_at)
    whole = KEY_PATTERN.fullmatch(key_or_prefix) is not None
    tenant_id = (await tenant_by_name(conn, tenant)).id if tenant is not None else None
    prefix = None if whole else key_or_prefix.removeprefix(KEY_PREFIX).split("_")[0]
    async with conn.transaction():
        found = await repo.live_keys_matching(
            conn,
            key_hash=hash_key(key_or_prefix) if whole else None,
            prefix=prefix,
            tenant_id=tenant_id,
        )
        if not found:
            raise ApiError(
                404, "not_found", f"no live key matches {'the given key' if whole else repr(prefix)}"
            )
        if len(found) > 1:
            tenants = sorted({k.tenant_name for k in found})
            raise ApiError(
                409,
                "conflict",
                f"{len(found)} live keys share the prefix {prefix!r} (tenants {', '.join(tenants)}); "
                "give the whole key, or --tenant NAME",
            )
        old = found[0]
        key = mint_key()
        await repo.insert_api_key(
            conn,
            tenant_id=old.tenant_id,
            prefix=key.prefix,
            key_hash=key.key_hash,
            role=old.role,
            operator=old.operator,
            expires_at=new_expiry,
        )
        until = datetime.now(UTC) + grace
        await repo.end_key_at(conn, tenant_id=old.tenant_id, key_id=old.id, at=until)
    if old.expires_at is not None:
        until = min(until, old.expires_at)
    return Rotation(plain=key.plain, old=old, old_valid_until=until)


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
