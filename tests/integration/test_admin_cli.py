"""Admin commands: revoking exactly the key meant, and a bootstrap that cannot lose the admin key."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path

import asyncpg
import pytest

from app.auth import hash_key
from app.infra.config import Settings
from app.infra.db import connect
from app.infra.embedded_pg import with_database
from app.infra.migrate import upgrade_to_head
from app.repositories import tenants as tenant_repo
from app.services.tenants import bootstrap
from tests.support import TenantFactory

ROOT = Path(__file__).resolve().parents[2]


async def _recalld(data_dir: Path, *args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "app.cli",
        *args,
        cwd=ROOT,
        env={"RECALLD_DATA_DIR": str(data_dir), "HF_HUB_OFFLINE": "1", "PATH": os.environ.get("PATH", "")},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    assert process.returncode is not None
    return process.returncode, output.decode()


async def test_revoking_by_prefix_never_reaches_another_tenants_key(
    make_tenant: TenantFactory, admin_conn: asyncpg.Connection, data_dir: Path
) -> None:
    a = await make_tenant("a")
    b = await make_tenant("b")
    # Two keys whose 32-bit prefixes collide, in two tenants (2^-32 per pair, but keys are many).
    prefix = uuid.uuid4().hex[:8]
    plain = {t.id: f"rk_{prefix}_{uuid.uuid4().hex}{uuid.uuid4().hex[:11]}" for t in (a, b)}
    for tenant_id, key in plain.items():
        await tenant_repo.insert_api_key(
            admin_conn,
            tenant_id=tenant_id,
            prefix=prefix,
            key_hash=hash_key(key),
            role="admin",
            operator=False,
        )

    async def live(tenant_id: str) -> bool:
        row = await admin_conn.fetchval(
            "SELECT revoked_at IS NULL FROM api_key WHERE key_hash = $1", hash_key(plain[tenant_id])
        )
        return bool(row)

    code, output = await _recalld(data_dir, "keys", "revoke", f"rk_{prefix}")
    assert code == 1
    assert "--tenant" in output
    assert await live(a.id) and await live(b.id)

    code, output = await _recalld(data_dir, "keys", "revoke", f"rk_{prefix}", "--tenant", a.name)
    assert code == 0, output
    assert not await live(a.id)
    assert await live(b.id)


async def test_bootstrap_that_cannot_save_the_admin_key_creates_nothing(
    dsn: str, admin_conn: asyncpg.Connection, tmp_path: Path
) -> None:
    name = f"boot_{uuid.uuid4().hex[:8]}"
    # CREATE DATABASE takes no parameters; the name is generated here, not user input.
    await admin_conn.execute(f'CREATE DATABASE "{name}"')
    fresh = with_database(dsn, name)
    try:
        await asyncio.to_thread(upgrade_to_head, fresh)
        settings = Settings(data_dir=tmp_path / "data")
        conn = await connect(fresh)
        try:
            # The key file cannot be written (a crash at that moment has the same effect).
            settings.admin_key_path.mkdir(parents=True)
            with pytest.raises(OSError):
                await bootstrap(conn, settings.admin_key_path)
            assert await tenant_repo.count_tenants(conn) == 0  # so the next start bootstraps again

            settings.admin_key_path.rmdir()
            key = await bootstrap(conn, settings.admin_key_path)
            assert key is not None
            assert settings.admin_key_path.read_text() == key + "\n"
            assert settings.admin_key_path.stat().st_mode & 0o777 == 0o600
            assert (
                await conn.fetchval("SELECT role FROM api_key WHERE key_hash = $1", hash_key(key)) == "admin"
            )
            assert [p.name for p in settings.admin_key_path.parent.iterdir()] == ["admin.key"]
        finally:
            await conn.close()
    finally:
        await admin_conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
