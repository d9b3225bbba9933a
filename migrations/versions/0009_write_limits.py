"""Write limits: what an idempotency key was used for, and each tenant's usage kept by triggers.

idempotency_fingerprint: a digest of the write an idempotency key first stored, so a retry with
the same key but a different body (or kind) is a 409 instead of silently answering the first
memory. Rows written before this revision have none; they are compared by kind and content.

tenant_usage: one row per tenant with its memory count and bytes, kept current by statement-level
triggers on memory, so checking a quota before a write is one primary-key read instead of a count
over the tenant's rows.

Revision ID: 0009_write_limits
Revises: 0008_keyword_stats_tenant_delete
"""

from alembic import op

revision = "0009_write_limits"
down_revision = "0008_keyword_stats_tenant_delete"
branch_labels = None
depends_on = None

# Content plus metadata as stored: what a tenant's byte quota counts.
_ROW_BYTES = "octet_length(content) + octet_length(metadata::text)"


def upgrade() -> None:
    op.execute("ALTER TABLE memory ADD COLUMN idempotency_fingerprint bytea")
    op.execute(
        """
        CREATE TABLE tenant_usage (
            tenant_id uuid NOT NULL,
            memories bigint NOT NULL DEFAULT 0,
            bytes bigint NOT NULL DEFAULT 0,
            CONSTRAINT tenant_usage_pkey PRIMARY KEY (tenant_id),
            CONSTRAINT tenant_usage_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenant (id) ON DELETE CASCADE
        )
        """
    )
    op.execute("ALTER TABLE tenant_usage ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE tenant_usage FORCE ROW LEVEL SECURITY")
    op.execute(
        "CREATE POLICY tenant_usage_tenant_isolation ON tenant_usage "
        "USING (tenant_id = ANY (recalld_tenant_ids())) "
        "WITH CHECK (tenant_id = ANY (recalld_tenant_ids()))"
    )
    op.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON tenant_usage TO recalld_app")
    op.execute(
        f"INSERT INTO tenant_usage (tenant_id, memories, bytes) "
        f"SELECT tenant_id, count(*), coalesce(sum({_ROW_BYTES}), 0) FROM memory GROUP BY tenant_id"
    )
    # One upsert per statement and tenant (a multi-row delete of a document's chunks is one).
    op.execute(
        f"""
        CREATE FUNCTION tenant_usage_of_new_rows() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO tenant_usage AS u (tenant_id, memories, bytes)
            SELECT tenant_id, count(*), sum({_ROW_BYTES}) FROM new_rows GROUP BY tenant_id
            ON CONFLICT (tenant_id) DO UPDATE
                SET memories = u.memories + EXCLUDED.memories, bytes = u.bytes + EXCLUDED.bytes;
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        f"""
        CREATE FUNCTION tenant_usage_of_old_rows() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE tenant_usage u SET memories = u.memories - d.memories, bytes = u.bytes - d.bytes
            FROM (SELECT tenant_id, count(*) AS memories, sum({_ROW_BYTES}) AS bytes
                  FROM old_rows GROUP BY tenant_id) d
            WHERE u.tenant_id = d.tenant_id;
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        "CREATE TRIGGER memory_tenant_usage_insert AFTER INSERT ON memory "
        "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION tenant_usage_of_new_rows()"
    )
    op.execute(
        "CREATE TRIGGER memory_tenant_usage_delete AFTER DELETE ON memory "
        "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION tenant_usage_of_old_rows()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER memory_tenant_usage_delete ON memory")
    op.execute("DROP TRIGGER memory_tenant_usage_insert ON memory")
    op.execute("DROP FUNCTION tenant_usage_of_old_rows()")
    op.execute("DROP FUNCTION tenant_usage_of_new_rows()")
    op.execute("DROP TABLE tenant_usage")
    op.execute("ALTER TABLE memory DROP COLUMN idempotency_fingerprint")
