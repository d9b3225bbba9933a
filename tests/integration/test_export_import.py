"""Export and import of a tenant: lossless through the CLI, all or nothing, and the admin endpoint's isolation."""

from __future__ import annotations

import gzip
import json
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import numpy as np
import pytest

from app.auth import Role, mint_key
from app.repositories import tenants as tenant_repo
from app.services.transfer import TABLES
from tests.integration.test_admin_cli import _recalld
from tests.support import TenantFactory, TenantKeys
from tests.tenant_content import fill, snapshot

pytestmark = pytest.mark.usefixtures("app")


async def _keys_for(conn: asyncpg.Connection, name: str) -> TenantKeys:
    """Keys for a tenant that `recalld import` created."""
    tenant = await tenant_repo.get_tenant_by_name(conn, name=name)
    assert tenant is not None
    keys: dict[str, str] = {}
    roles: tuple[Role, ...] = ("reader", "writer", "admin")
    for role in roles:
        key = mint_key()
        await tenant_repo.insert_api_key(
            conn, tenant_id=tenant.id, prefix=key.prefix, key_hash=key.key_hash, role=role, operator=False
        )
        keys[role] = key.plain
    return TenantKeys(name=name, id=tenant.id, **keys)


async def _rows(
    conn: asyncpg.Connection, tenant_id: str, *, leave_out: tuple[str, ...] = ()
) -> dict[str, list[Any]]:
    """Every row of every exported table, as stored, without tenant_id (and leave_out)."""
    out = {}
    for table in TABLES:
        # Table names from the service's fixed list; no user input.
        records = await conn.fetch(
            f"SELECT to_jsonb(t) - 'tenant_id' - $2::text[] AS r FROM {table} t WHERE tenant_id = $1::uuid",
            tenant_id,
            list(leave_out),
        )
        out[table] = sorted(json.dumps(r["r"], sort_keys=True) for r in records)
    return out


def _vectors(rows: dict[str, list[Any]]) -> dict[str, np.ndarray]:
    memories = [json.loads(r) for r in rows["memory"]]
    return {m["id"]: np.array(json.loads(m["embedding"]), dtype=np.float32) for m in memories}


async def test_export_then_import_into_a_new_tenant_is_lossless(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    admin_conn: asyncpg.Connection,
    data_dir: Path,
    tmp_path: Path,
) -> None:
    source = await make_tenant("src")
    links = await fill(client, source)
    export = tmp_path / "src.jsonl.gz"
    code, output = await _recalld(data_dir, "export", "--tenant", source.name, "--output", str(export))
    assert code == 0, output
    lines = gzip.decompress(export.read_bytes()).decode().splitlines()
    header, last = json.loads(lines[0]), json.loads(lines[-1])
    assert header["format"] == "recalld-export" and header["schema_revision"] and header["embedding"] is None
    assert last["end"] is True and last["rows"]["memory"] == len(lines) - 2 - sum(
        n for t, n in last["rows"].items() if t != "memory"
    )
    assert all("tenant_id" not in json.loads(line).get("row", {}) for line in lines)

    target_name = f"dst-{uuid.uuid4().hex[:10]}"
    code, output = await _recalld(data_dir, "import", "--tenant", target_name, str(export))
    assert code == 0, output
    assert f"created tenant '{target_name}'" in output
    target = await _keys_for(admin_conn, target_name)

    # Every stored row is the same, ids, timestamps, counts and links included; the vectors were
    # computed again from the same texts by the same model.
    before = await _rows(admin_conn, source.id)
    after = await _rows(admin_conn, target.id)
    assert await _rows(admin_conn, source.id, leave_out=("embedding",)) == await _rows(
        admin_conn, target.id, leave_out=("embedding",)
    )
    old, new = _vectors(before), _vectors(after)
    assert old.keys() == new.keys()
    for memory_id, vector in old.items():
        assert float(np.dot(vector, new[memory_id])) > 0.999, memory_id

    seen_source = await snapshot(client, source)
    seen_target = await snapshot(client, target)
    assert seen_source == seen_target
    facts = {m["id"]: m for m in seen_target["memories"]["fact"]}
    assert facts[links["new"]]["supersedes"] == links["old"]
    assert facts[links["old"]]["validity"] == "superseded"
    assert facts[links["new"]]["reference_count"] >= 2
    assert len(seen_target["memories"]["episode"]) == 1 and seen_target["document"].startswith("# The boat")
    assert sorted(f["path"] for f in seen_target["code_files"]["files"]) == [
        "src/engine.py",
        "src/harbour.py",
    ]


async def test_with_embeddings_the_vectors_travel_and_nothing_is_embedded(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    admin_conn: asyncpg.Connection,
    data_dir: Path,
    tmp_path: Path,
) -> None:
    source = await make_tenant("vec")
    await fill(client, source)
    export = tmp_path / "vec.jsonl"
    code, output = await _recalld(
        data_dir, "export", "--tenant", source.name, "--output", str(export), "--with-embeddings"
    )
    assert code == 0, output
    target_name = f"vecdst-{uuid.uuid4().hex[:10]}"
    code, output = await _recalld(data_dir, "import", "--tenant", target_name, str(export))
    assert code == 0, output
    assert "embedded" not in output
    target = await tenant_repo.get_tenant_by_name(admin_conn, name=target_name)
    assert target is not None
    assert await _rows(admin_conn, source.id) == await _rows(admin_conn, target.id)


async def test_importing_into_a_tenant_that_holds_data_renumbers_ids_and_links_alike(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    admin_conn: asyncpg.Connection,
    data_dir: Path,
    tmp_path: Path,
) -> None:
    source = await make_tenant("facts")
    old = (
        await client.post("/v1/facts", json={"content": "The ferry leaves at 9"}, headers=source.headers())
    ).json()
    new = (
        await client.post(
            "/v1/facts",
            json={"content": "The ferry leaves at 10", "supersedes": old["id"]},
            headers=source.headers(),
        )
    ).json()
    export = tmp_path / "facts.jsonl"
    code, output = await _recalld(data_dir, "export", "--tenant", source.name, "--output", str(export))
    assert code == 0, output
    # Into the same tenant: every id would clash.
    code, output = await _recalld(data_dir, "import", "--tenant", source.name, str(export))
    assert code == 0, output
    assert "renumbered" in output
    rows = await admin_conn.fetch(
        "SELECT id::text, content, supersedes::text, validity FROM memory WHERE tenant_id = $1::uuid",
        source.id,
    )
    assert len(rows) == 4
    copies = {r["content"]: r for r in rows if r["id"] not in (old["id"], new["id"])}
    assert copies["The ferry leaves at 10"]["supersedes"] == copies["The ferry leaves at 9"]["id"]
    assert copies["The ferry leaves at 9"]["validity"] == "superseded"


async def test_a_cut_off_or_clashing_import_stores_nothing(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    admin_conn: asyncpg.Connection,
    data_dir: Path,
    tmp_path: Path,
) -> None:
    source = await make_tenant("cut")
    await fill(client, source)
    export = tmp_path / "cut.jsonl"
    code, output = await _recalld(data_dir, "export", "--tenant", source.name, "--output", str(export))
    assert code == 0, output
    cut = tmp_path / "cut-short.jsonl"
    cut.write_text("".join(export.read_text().splitlines(keepends=True)[:-1]))
    target = await make_tenant("cutdst")
    code, output = await _recalld(data_dir, "import", "--tenant", target.name, str(cut))
    assert code == 1 and "incomplete" in output
    assert all(not rows for rows in (await _rows(admin_conn, target.id)).values())
    # The same document path already stored: refused whole, with the clash named.
    code, output = await _recalld(data_dir, "import", "--tenant", source.name, str(export))
    assert code == 1 and "already holds" in output
    code, output = await _recalld(
        data_dir, "import", "--tenant", target.name, str(tmp_path / "missing.jsonl")
    )
    assert code == 1 and "cannot read" in output


async def test_export_endpoint_streams_only_the_callers_tenant_to_its_admin(
    client: httpx.AsyncClient, make_tenant: TenantFactory, admin_conn: asyncpg.Connection
) -> None:
    mine = await make_tenant("exp")
    other = await make_tenant("exp-other", operator=True)
    await fill(client, mine)
    await client.post("/v1/facts", json={"content": "other tenant secret harbour"}, headers=other.headers())

    for role in ("reader", "writer"):
        refused = await client.get("/v1/export", headers=mine.headers(role))
        assert refused.status_code == 403
    response = await client.get("/v1/export", headers=mine.headers("admin"))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert lines[0]["tenant"] == mine.name and lines[-1]["end"] is True
    exported = {r["row"]["id"] for r in lines[1:-1] if r["table"] == "memory"}
    stored = {
        str(r["id"])
        for r in await admin_conn.fetch("SELECT id FROM memory WHERE tenant_id = $1::uuid", mine.id)
    }
    assert exported == stored
    assert "other tenant secret" not in response.text
    # An operator key exports its own tenant only, too.
    theirs = await client.get("/v1/export", headers=other.headers("admin"))
    assert theirs.status_code == 200 and mine.name not in theirs.text and "harbour" in theirs.text
