"""The schema keeps the Citus scale-out path open (SPEC §1, docs/scale-out.md).

On Citus every tenant table is distributed by tenant_id. That works only if each primary key and
unique index contains the distribution column (here: leads with it, as the spec requires), foreign
keys between distributed tables carry tenant_id on both sides, and each table is either tenant
data or a small registry that becomes a reference table. These tests read the migrated catalog, so
a migration that breaks any of it fails here, not on the day of the move.
"""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg

SCALE_OUT_DOC = Path(__file__).resolve().parents[2] / "docs" / "scale-out.md"
# Alembic's own bookkeeping stays on the coordinator: migrations run there.
LOCAL_TABLES = frozenset({"alembic_version"})


async def _tables(conn: asyncpg.Connection) -> set[str]:
    rows = await conn.fetch(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')"
    )
    return {r["relname"] for r in rows}


def _tenant_tables() -> set[str]:
    """Tables distributed by tenant_id, as docs/scale-out.md declares them."""
    return set(re.findall(r"create_distributed_table\('(\w+)', 'tenant_id'", SCALE_OUT_DOC.read_text()))


def _reference_tables() -> set[str]:
    return set(re.findall(r"create_reference_table\('(\w+)'\)", SCALE_OUT_DOC.read_text()))


async def test_every_table_is_distributed_by_tenant_or_a_reference_table(
    admin_conn: asyncpg.Connection,
) -> None:
    tables = await _tables(admin_conn)
    tenant, reference = _tenant_tables(), _reference_tables()
    assert tenant, "docs/scale-out.md declares no distributed tables"
    assert not tenant & reference, f"declared both distributed and reference: {sorted(tenant & reference)}"
    undeclared = tables - tenant - reference - LOCAL_TABLES
    assert not undeclared, f"tables missing from docs/scale-out.md: {sorted(undeclared)}"
    gone = (tenant | reference) - tables
    assert not gone, f"docs/scale-out.md names tables that do not exist: {sorted(gone)}"
    typed = await admin_conn.fetch(
        "SELECT table_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_schema = 'public' AND column_name = 'tenant_id' AND table_name = ANY($1::text[])",
        sorted(tenant),
    )
    assert {r["table_name"] for r in typed} == tenant, "a distributed table lacks tenant_id"
    assert {(r["data_type"], r["is_nullable"]) for r in typed} == {("uuid", "NO")}


async def test_primary_keys_unique_and_btree_indexes_of_tenant_tables_lead_with_tenant_id(
    admin_conn: asyncpg.Connection,
) -> None:
    tenant = _tenant_tables()
    rows = await admin_conn.fetch(
        "SELECT t.relname AS table_name, i.relname AS index_name, x.indisunique AS is_unique, "
        "       am.amname AS method, a.attname AS first_column "
        "FROM pg_index x JOIN pg_class t ON t.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid "
        "JOIN pg_am am ON am.oid = i.relam "
        "LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = x.indkey[0] "
        "WHERE t.relname = ANY($1::text[]) AND t.relnamespace = 'public'::regnamespace",
        sorted(tenant),
    )
    assert rows
    # GIN and HNSW cannot lead with tenant_id (one column each, no btree_gin); they are never
    # unique, and on Citus each shard simply holds its own.
    offending = [
        f"{r['table_name']}.{r['index_name']} starts with {r['first_column']}"
        for r in rows
        if (r["is_unique"] or r["method"] == "btree") and r["first_column"] != "tenant_id"
    ]
    assert not offending, offending
    unique_constraints = await admin_conn.fetch(
        "SELECT conrelid::regclass::text AS table_name, conname, "
        "       (SELECT attname FROM pg_attribute WHERE attrelid = conrelid AND attnum = conkey[1]) AS first_column "
        "FROM pg_constraint WHERE contype IN ('p', 'u', 'x') AND conrelid::regclass::text = ANY($1::text[])",
        sorted(tenant),
    )
    assert {r["table_name"] for r in unique_constraints if r["conname"].endswith("_pkey")} == tenant, (
        "every tenant table needs a primary key"
    )
    assert [r["conname"] for r in unique_constraints if r["first_column"] != "tenant_id"] == []


async def test_no_foreign_key_crosses_tenants(admin_conn: asyncpg.Connection) -> None:
    tenant, reference = _tenant_tables(), _reference_tables()
    keys = await admin_conn.fetch(
        "SELECT conname, conrelid::regclass::text AS source, confrelid::regclass::text AS target, "
        "       ARRAY(SELECT attname FROM unnest(conkey) WITH ORDINALITY k(n, i) "
        "             JOIN pg_attribute ON attrelid = conrelid AND attnum = k.n ORDER BY k.i) AS source_columns, "
        "       ARRAY(SELECT attname FROM unnest(confkey) WITH ORDINALITY k(n, i) "
        "             JOIN pg_attribute ON attrelid = confrelid AND attnum = k.n ORDER BY k.i) AS target_columns "
        "FROM pg_constraint WHERE contype = 'f' AND connamespace = 'public'::regnamespace"
    )
    assert keys
    for key in keys:
        source, target = key["source"], key["target"]
        if source in reference:
            # Citus allows no foreign key from a reference table to a distributed one.
            assert target in reference, f"{key['conname']}: reference table {source} points at {target}"
        elif target in tenant:
            # Between distributed tables the key must carry tenant_id on both sides, paired up,
            # so the referenced row is in the same tenant (and the same shard).
            pairs = list(zip(key["source_columns"], key["target_columns"], strict=True))
            assert ("tenant_id", "tenant_id") in pairs, f"{key['conname']} crosses tenants"
        else:
            assert target in reference, f"{key['conname']}: {source} points at undeclared {target}"


async def test_every_tenant_table_has_forced_row_level_security(admin_conn: asyncpg.Connection) -> None:
    tenant = _tenant_tables()
    rows = await admin_conn.fetch(
        "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, "
        "       (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid) AS policies "
        "FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relname = ANY($1::text[])",
        sorted(tenant),
    )
    assert {r["relname"] for r in rows} == tenant
    unguarded = [r["relname"] for r in rows if not (r["relrowsecurity"] and r["relforcerowsecurity"])]
    assert unguarded == []
    assert [r["relname"] for r in rows if r["policies"] == 0] == []
