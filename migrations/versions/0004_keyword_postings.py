"""Keyword postings: a per-tenant inverted index that BM25 is computed from.

pg_textsearch keeps one corpus for the whole table: its index answers a global top-k that a tenant
filter then thins out (a small tenant got too few rows), its statistics mix tenants, and 0.6.1 lost
its in-memory segments on every server restart. This table holds, for each memory row and lexeme of
its search_vector, the term frequency and the row's length, so BM25 with k1 1.2 / b 0.75 is one
indexed aggregate over the tenant's own postings: exact per tenant, durable like any table, and
available on every PostgreSQL. Triggers keep it in step with memory, whatever path writes there.

Revision ID: 0004_keyword_postings
Revises: 0003_code
"""

from alembic import op
from sqlalchemy import text

revision = "0004_keyword_postings"
down_revision = "0003_code"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE keyword_posting (
            tenant_id uuid NOT NULL,
            lexeme text NOT NULL,
            memory_id uuid NOT NULL,
            term_frequency integer NOT NULL,
            -- Distinct lexemes of the row: BM25's document length, copied here so scoring never
            -- has to visit the memory rows of every candidate.
            document_length integer NOT NULL,
            CONSTRAINT keyword_posting_pkey PRIMARY KEY (tenant_id, lexeme, memory_id),
            CONSTRAINT keyword_posting_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenant (id) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        """
        CREATE FUNCTION keyword_postings_of_new_rows() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO keyword_posting (tenant_id, lexeme, memory_id, term_frequency, document_length)
            SELECT n.tenant_id, t.lexeme, n.id, greatest(coalesce(cardinality(t.positions), 1), 1),
                   length(n.search_vector)
            FROM new_rows n CROSS JOIN LATERAL unnest(n.search_vector) AS t;
            RETURN NULL;
        END
        $$
        """
    )
    # Deletes are per row: the old lexemes make each delete a primary-key lookup, and a
    # statement-level join against a transition table (no statistics) risked a full scan.
    op.execute(
        """
        CREATE FUNCTION keyword_postings_of_old_row() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            DELETE FROM keyword_posting
            WHERE tenant_id = OLD.tenant_id AND memory_id = OLD.id
              AND lexeme = ANY (tsvector_to_array(OLD.search_vector));
            IF TG_OP = 'UPDATE' THEN
                INSERT INTO keyword_posting (tenant_id, lexeme, memory_id, term_frequency, document_length)
                SELECT NEW.tenant_id, t.lexeme, NEW.id, greatest(coalesce(cardinality(t.positions), 1), 1),
                       length(NEW.search_vector)
                FROM unnest(NEW.search_vector) AS t;
            END IF;
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        "CREATE TRIGGER memory_keyword_postings_insert AFTER INSERT ON memory "
        "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION keyword_postings_of_new_rows()"
    )
    op.execute(
        "CREATE TRIGGER memory_keyword_postings_delete AFTER DELETE ON memory "
        "FOR EACH ROW EXECUTE FUNCTION keyword_postings_of_old_row()"
    )
    # Only a change of the indexed text fires this; reference bumps and line updates do not.
    op.execute(
        "CREATE TRIGGER memory_keyword_postings_update AFTER UPDATE OF search_text ON memory "
        "FOR EACH ROW WHEN (OLD.search_text IS DISTINCT FROM NEW.search_text) "
        "EXECUTE FUNCTION keyword_postings_of_old_row()"
    )
    op.execute(
        "INSERT INTO keyword_posting (tenant_id, lexeme, memory_id, term_frequency, document_length) "
        "SELECT m.tenant_id, t.lexeme, m.id, greatest(coalesce(cardinality(t.positions), 1), 1), "
        "length(m.search_vector) FROM memory m CROSS JOIN LATERAL unnest(m.search_vector) AS t"
    )
    op.execute("ALTER TABLE keyword_posting ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE keyword_posting FORCE ROW LEVEL SECURITY")
    op.execute(
        "CREATE POLICY keyword_posting_tenant_isolation ON keyword_posting "
        "USING (tenant_id = ANY (recalld_tenant_ids())) "
        "WITH CHECK (tenant_id = ANY (recalld_tenant_ids()))"
    )
    op.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON keyword_posting TO recalld_app")
    op.execute("DROP INDEX IF EXISTS memory_search_text_bm25")
    op.execute("DELETE FROM system_config WHERE key = 'bm25_rebuild'")


def downgrade() -> None:
    op.execute("DROP TRIGGER memory_keyword_postings_update ON memory")
    op.execute("DROP TRIGGER memory_keyword_postings_delete ON memory")
    op.execute("DROP TRIGGER memory_keyword_postings_insert ON memory")
    op.execute("DROP FUNCTION keyword_postings_of_old_row()")
    op.execute("DROP FUNCTION keyword_postings_of_new_rows()")
    op.execute("DROP TABLE keyword_posting")
    loadable = (
        op.get_bind().execute(text("SELECT 1 FROM pg_extension WHERE extname = 'pg_textsearch'")).scalar()
    )
    if loadable:
        op.execute(
            "CREATE INDEX memory_search_text_bm25 ON memory USING bm25 (search_text) "
            "WITH (text_config = 'english', k1 = 1.2, b = 0.75)"
        )
