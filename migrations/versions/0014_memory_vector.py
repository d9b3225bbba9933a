"""memory_vector: each memory's embedding again, narrow, stored in line and grouped by tenant.

The exact vector scan of a tenant read the wide memory rows (about 2 kB each with the vector, three
to a page, the vector pushed out to TOAST once a row passes 2 kB), evaluated every filter on every
row, and computed the distance twice: 27.6 ms for 10,000 rows where HNSW took 1.9. So a tenant
among bigger neighbours, too small a share of the table for HNSW's filtered walk, paid ~25 ms per
search for its neighbours. Here the exact scan reads (tenant_id, memory_id, embedding) rows with
the vector at a fixed offset and never out of line (STORAGE PLAIN), ranks them by distance alone,
and applies the filters to the best few only (docs/benchmarks.md, "Tenant-sized vector leg").

Triggers keep it in step with memory in the writing transaction: a row with an embedding gets its
copy on insert, an update of the embedding replaces or removes it, and the foreign key's cascade
removes it with its memory (forget, expiry, tenant deletion). HNSW stays on memory.embedding.

Revision ID: 0014_memory_vector
Revises: 0013_keyword_blocks
"""

from alembic import op
from sqlalchemy import text

revision = "0014_memory_vector"
down_revision = "0013_keyword_blocks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE memory_vector (
            tenant_id uuid NOT NULL,
            memory_id uuid NOT NULL,
            embedding vector(384) NOT NULL,
            CONSTRAINT memory_vector_pkey PRIMARY KEY (tenant_id, memory_id),
            CONSTRAINT memory_vector_memory_fkey FOREIGN KEY (tenant_id, memory_id)
                REFERENCES memory (tenant_id, id) ON DELETE CASCADE
        ) WITH (autovacuum_vacuum_insert_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02)
        """
    )
    # In line, uncompressed: 1,540 bytes of floats do not compress, and a TOAST fetch per row was
    # what made the old exact scan slow.
    op.execute("ALTER TABLE memory_vector ALTER COLUMN embedding SET STORAGE PLAIN")
    op.execute("ALTER TABLE memory_vector ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE memory_vector FORCE ROW LEVEL SECURITY")
    # The tenant list as an InitPlan, computed once per statement, as 0012_rls_tenant_ids_once
    # does for the other tables (a sequential scan: 13 ms instead of 5 for 10,000 rows).
    op.execute(
        "CREATE POLICY memory_vector_tenant_isolation ON memory_vector "
        "USING (tenant_id = ANY ((SELECT recalld_tenant_ids())::uuid[])) "
        "WITH CHECK (tenant_id = ANY ((SELECT recalld_tenant_ids())::uuid[]))"
    )
    op.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON memory_vector TO recalld_app")
    # One statement per written batch: a batch's vectors land together, on adjacent pages.
    op.execute(
        """
        CREATE FUNCTION memory_vector_of_new_rows() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO memory_vector (tenant_id, memory_id, embedding)
            SELECT n.tenant_id, n.id, n.embedding FROM new_rows n WHERE n.embedding IS NOT NULL
            ORDER BY n.tenant_id, n.id;
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        """
        CREATE FUNCTION memory_vector_of_updated_row() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.embedding IS NULL THEN
                DELETE FROM memory_vector WHERE tenant_id = NEW.tenant_id AND memory_id = NEW.id;
            ELSE
                INSERT INTO memory_vector (tenant_id, memory_id, embedding)
                VALUES (NEW.tenant_id, NEW.id, NEW.embedding)
                ON CONFLICT ON CONSTRAINT memory_vector_pkey DO UPDATE SET embedding = excluded.embedding;
            END IF;
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        "CREATE TRIGGER memory_vector_insert AFTER INSERT ON memory REFERENCING NEW TABLE AS new_rows "
        "FOR EACH STATEMENT EXECUTE FUNCTION memory_vector_of_new_rows()"
    )
    op.execute(
        "CREATE TRIGGER memory_vector_update AFTER UPDATE OF embedding ON memory FOR EACH ROW "
        "WHEN (OLD.embedding IS DISTINCT FROM NEW.embedding) EXECUTE FUNCTION memory_vector_of_updated_row()"
    )
    bind = op.get_bind()
    # memory forces row-level security: this transaction may see (and copy) every tenant's rows.
    bind.execute(
        text(
            "SELECT set_config('recalld.tenant_ids', coalesce(string_agg(id::text, ','), ''), true) FROM tenant"
        )
    )
    # Tenant by tenant in key order, so each tenant's vectors sit on adjacent pages.
    bind.execute(
        text(
            "INSERT INTO memory_vector (tenant_id, memory_id, embedding) "
            "SELECT tenant_id, id, embedding FROM memory WHERE embedding IS NOT NULL ORDER BY tenant_id, id"
        )
    )
    bind.execute(text("ANALYZE memory_vector"))


def downgrade() -> None:
    op.execute("DROP TRIGGER memory_vector_update ON memory")
    op.execute("DROP TRIGGER memory_vector_insert ON memory")
    op.execute("DROP FUNCTION memory_vector_of_updated_row()")
    op.execute("DROP FUNCTION memory_vector_of_new_rows()")
    op.execute("DROP TABLE memory_vector")
