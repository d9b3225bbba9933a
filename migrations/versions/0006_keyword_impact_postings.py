"""Keyword postings in impact order, per-tenant BM25 statistics kept at write time, no unused GIN.

The keyword leg scored every posting of every query lexeme, twice (a count for the document
frequency, then the scores), so its cost grew with the tenant: 3 ms at 10,000 memories, ~60 ms at
200,000. Now:

- keyword_posting's key is (tenant_id, lexeme, impact, memory_id): reading a lexeme's postings
  backwards gives them best first, so the leg takes a bounded number per lexeme instead of all.
  impact is BM25's term-frequency part, quantised to smallint, with a fixed reference length
  (IMPACT_REFERENCE_LENGTH): it only orders a lexeme's postings (for the common tf = 1 that order
  is by length whatever the reference) and the delete trigger can recompute it from the old row;
  scores are still computed from tf and the document length with the tenant's real average.
- keyword_lexeme_stat holds document frequencies and keyword_corpus_stat the row count and total
  length per tenant, so N, avgdl and df are a few indexed rows instead of counts over the tenant.
  Writers add signed deltas to the row of their backend's stripe (pid mod STRIPES): concurrent
  batches of different connections rarely touch the same row, and a statement locks its rows in
  key order. A search sums the stripes.
- The GIN index on memory.search_vector is dropped: no statement has read it since BM25 moved to
  the postings. The stored search_vector stays (SPEC §3; the triggers and re-scoring read it).

Revision ID: 0006_keyword_impact_postings
Revises: 0005_keyword_posting_covering
"""

from alembic import op

revision = "0006_keyword_impact_postings"
down_revision = "0005_keyword_posting_covering"
branch_labels = None
depends_on = None

STRIPES = 16
IMPACT_REFERENCE_LENGTH = 16.0
STAT_TABLES = ("keyword_lexeme_stat", "keyword_corpus_stat")

# One posting row per (memory, lexeme) of the rows in `source` (alias n with tenant_id, id,
# search_vector), term frequency = positions (1 when a lexeme has none).
_POSTINGS_OF = """
    SELECT n.tenant_id, t.lexeme, keyword_impact(greatest(coalesce(cardinality(t.positions), 1), 1),
                                                length(n.search_vector)),
           n.id, greatest(coalesce(cardinality(t.positions), 1), 1), length(n.search_vector)
    FROM {source} n CROSS JOIN LATERAL unnest(n.search_vector) AS t
"""
_INSERT_POSTINGS = (
    "INSERT INTO keyword_posting (tenant_id, lexeme, impact, memory_id, term_frequency, document_length)"
)


def _add_stats(source: str, sign: str) -> tuple[str, str]:
    """Statements adding (sign '') or removing ('-') the rows of `source` to the tenant statistics."""
    return (
        f"""
        INSERT INTO keyword_lexeme_stat AS s (tenant_id, lexeme, stripe, documents)
        SELECT n.tenant_id, t.lexeme, keyword_stripe(), {sign}count(*)
        FROM {source} n CROSS JOIN LATERAL unnest(tsvector_to_array(n.search_vector)) AS t(lexeme)
        GROUP BY n.tenant_id, t.lexeme ORDER BY n.tenant_id, t.lexeme
        ON CONFLICT (tenant_id, lexeme, stripe) DO UPDATE SET documents = s.documents + excluded.documents
        """,
        f"""
        INSERT INTO keyword_corpus_stat AS s (tenant_id, stripe, documents, total_length)
        SELECT n.tenant_id, keyword_stripe(), {sign}count(*), {sign}sum(length(n.search_vector))
        FROM {source} n GROUP BY n.tenant_id ORDER BY n.tenant_id
        ON CONFLICT (tenant_id, stripe) DO UPDATE
        SET documents = s.documents + excluded.documents, total_length = s.total_length + excluded.total_length
        """,
    )


def _in_plpgsql(statements: tuple[str, str]) -> str:
    return ";\n".join(statements) + ";"


def upgrade() -> None:
    op.execute("DROP INDEX IF EXISTS memory_search_vector_gin")
    op.execute("DROP TRIGGER memory_keyword_postings_update ON memory")
    op.execute("DROP TRIGGER memory_keyword_postings_delete ON memory")
    op.execute("DROP TRIGGER memory_keyword_postings_insert ON memory")
    op.execute("DROP FUNCTION keyword_postings_of_old_row()")
    op.execute("DROP FUNCTION keyword_postings_of_new_rows()")
    op.execute("DROP TABLE keyword_posting")
    op.execute(
        f"""
        CREATE FUNCTION keyword_impact(term_frequency integer, document_length integer) RETURNS smallint
        LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
            SELECT round(32767.0 * term_frequency
                         / (term_frequency + 1.2 * (0.25 + 0.75 * document_length / {IMPACT_REFERENCE_LENGTH})))::smallint
        $$
        """
    )
    op.execute(
        f"CREATE FUNCTION keyword_stripe() RETURNS smallint LANGUAGE sql VOLATILE PARALLEL SAFE "
        f"AS $$ SELECT (pg_backend_pid() % {STRIPES})::smallint $$"
    )
    op.execute(
        """
        CREATE TABLE keyword_posting (
            tenant_id uuid NOT NULL,
            lexeme text NOT NULL,
            impact smallint NOT NULL,
            memory_id uuid NOT NULL,
            term_frequency smallint NOT NULL,
            -- Distinct lexemes of the row: BM25's document length, here so scoring never has to
            -- visit the memory rows of every candidate.
            document_length integer NOT NULL,
            CONSTRAINT keyword_posting_pkey PRIMARY KEY (tenant_id, lexeme, impact, memory_id)
                INCLUDE (term_frequency, document_length),
            CONSTRAINT keyword_posting_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenant (id) ON DELETE CASCADE
        ) WITH (autovacuum_vacuum_insert_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02)
        """
    )
    op.execute(
        """
        CREATE TABLE keyword_lexeme_stat (
            tenant_id uuid NOT NULL,
            lexeme text NOT NULL,
            stripe smallint NOT NULL,
            documents integer NOT NULL,
            CONSTRAINT keyword_lexeme_stat_pkey PRIMARY KEY (tenant_id, lexeme, stripe),
            CONSTRAINT keyword_lexeme_stat_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenant (id) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        """
        CREATE TABLE keyword_corpus_stat (
            tenant_id uuid NOT NULL,
            stripe smallint NOT NULL,
            documents bigint NOT NULL,
            total_length bigint NOT NULL,
            CONSTRAINT keyword_corpus_stat_pkey PRIMARY KEY (tenant_id, stripe),
            CONSTRAINT keyword_corpus_stat_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenant (id) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        f"""
        CREATE FUNCTION keyword_index_new_rows() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            {_INSERT_POSTINGS} {_POSTINGS_OF.format(source="new_rows")} ORDER BY 1, 2, 3, 4;
            {_in_plpgsql(_add_stats("new_rows", ""))}
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        f"""
        CREATE FUNCTION keyword_unindex_old_rows() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            {_in_plpgsql(_add_stats("old_rows", "-"))}
            RETURN NULL;
        END
        $$
        """
    )
    # Postings go per row: the old row's lexemes and impacts make each delete a primary-key
    # lookup, where a join against a transition table (no statistics) risked a full scan.
    op.execute(
        f"""
        CREATE FUNCTION keyword_postings_of_old_row() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            DELETE FROM keyword_posting p
            USING (SELECT t.lexeme, keyword_impact(greatest(coalesce(cardinality(t.positions), 1), 1),
                                                   length(OLD.search_vector)) AS impact
                   FROM unnest(OLD.search_vector) AS t) o
            WHERE p.tenant_id = OLD.tenant_id AND p.lexeme = o.lexeme AND p.impact = o.impact
              AND p.memory_id = OLD.id;
            IF TG_OP = 'UPDATE' THEN
                {_INSERT_POSTINGS}
                {_POSTINGS_OF.format(source="(SELECT NEW.tenant_id, NEW.id, NEW.search_vector)")};
                {_in_plpgsql(_add_stats("(SELECT OLD.tenant_id, OLD.search_vector)", "-"))}
                {_in_plpgsql(_add_stats("(SELECT NEW.tenant_id, NEW.search_vector)", ""))}
            END IF;
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        "CREATE TRIGGER memory_keyword_insert AFTER INSERT ON memory "
        "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION keyword_index_new_rows()"
    )
    op.execute(
        "CREATE TRIGGER memory_keyword_stats_delete AFTER DELETE ON memory "
        "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION keyword_unindex_old_rows()"
    )
    op.execute(
        "CREATE TRIGGER memory_keyword_postings_delete AFTER DELETE ON memory "
        "FOR EACH ROW EXECUTE FUNCTION keyword_postings_of_old_row()"
    )
    # Only a change of the indexed text fires this; reference bumps and line updates do not.
    op.execute(
        "CREATE TRIGGER memory_keyword_update AFTER UPDATE OF search_text ON memory "
        "FOR EACH ROW WHEN (OLD.search_text IS DISTINCT FROM NEW.search_text) "
        "EXECUTE FUNCTION keyword_postings_of_old_row()"
    )
    op.execute(f"{_INSERT_POSTINGS} {_POSTINGS_OF.format(source='memory')} ORDER BY 1, 2, 3, 4")
    for statement in _add_stats("memory", ""):
        op.execute(statement)
    for table in ("keyword_posting", *STAT_TABLES):
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(
            f"CREATE POLICY {table}_tenant_isolation ON {table} "
            "USING (tenant_id = ANY (recalld_tenant_ids())) "
            "WITH CHECK (tenant_id = ANY (recalld_tenant_ids()))"
        )
        op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO recalld_app")
    op.execute("GRANT EXECUTE ON FUNCTION keyword_impact(integer, integer), keyword_stripe() TO recalld_app")


def downgrade() -> None:
    op.execute("DROP TRIGGER memory_keyword_update ON memory")
    op.execute("DROP TRIGGER memory_keyword_postings_delete ON memory")
    op.execute("DROP TRIGGER memory_keyword_stats_delete ON memory")
    op.execute("DROP TRIGGER memory_keyword_insert ON memory")
    op.execute("DROP FUNCTION keyword_postings_of_old_row()")
    op.execute("DROP FUNCTION keyword_unindex_old_rows()")
    op.execute("DROP FUNCTION keyword_index_new_rows()")
    for table in STAT_TABLES:
        op.execute(f"DROP TABLE {table}")
    op.execute("DROP TABLE keyword_posting")
    op.execute("DROP FUNCTION keyword_stripe()")
    op.execute("DROP FUNCTION keyword_impact(integer, integer)")
    op.execute("CREATE INDEX memory_search_vector_gin ON memory USING gin (search_vector)")
    # 0005's layout: unordered postings, counted statistics.
    op.execute(
        """
        CREATE TABLE keyword_posting (
            tenant_id uuid NOT NULL,
            lexeme text NOT NULL,
            memory_id uuid NOT NULL,
            term_frequency integer NOT NULL,
            document_length integer NOT NULL,
            CONSTRAINT keyword_posting_pkey PRIMARY KEY (tenant_id, lexeme, memory_id)
                INCLUDE (term_frequency, document_length),
            CONSTRAINT keyword_posting_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenant (id) ON DELETE CASCADE
        ) WITH (autovacuum_vacuum_insert_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02)
        """
    )
    old_postings = (
        "INSERT INTO keyword_posting (tenant_id, lexeme, memory_id, term_frequency, document_length) "
        "SELECT n.tenant_id, t.lexeme, n.id, greatest(coalesce(cardinality(t.positions), 1), 1), "
        "length(n.search_vector) FROM {source} n CROSS JOIN LATERAL unnest(n.search_vector) AS t"
    )
    op.execute(
        "CREATE FUNCTION keyword_postings_of_new_rows() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        + old_postings.format(source="new_rows")
        + "; RETURN NULL; END $$"
    )
    op.execute(
        "CREATE FUNCTION keyword_postings_of_old_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "DELETE FROM keyword_posting WHERE tenant_id = OLD.tenant_id AND memory_id = OLD.id "
        "AND lexeme = ANY (tsvector_to_array(OLD.search_vector)); "
        "IF TG_OP = 'UPDATE' THEN "
        + old_postings.format(source="(SELECT NEW.tenant_id, NEW.id, NEW.search_vector)")
        + "; END IF; RETURN NULL; END $$"
    )
    op.execute(
        "CREATE TRIGGER memory_keyword_postings_insert AFTER INSERT ON memory "
        "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION keyword_postings_of_new_rows()"
    )
    op.execute(
        "CREATE TRIGGER memory_keyword_postings_delete AFTER DELETE ON memory "
        "FOR EACH ROW EXECUTE FUNCTION keyword_postings_of_old_row()"
    )
    op.execute(
        "CREATE TRIGGER memory_keyword_postings_update AFTER UPDATE OF search_text ON memory "
        "FOR EACH ROW WHEN (OLD.search_text IS DISTINCT FROM NEW.search_text) "
        "EXECUTE FUNCTION keyword_postings_of_old_row()"
    )
    op.execute(old_postings.format(source="memory"))
    op.execute("ALTER TABLE keyword_posting ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE keyword_posting FORCE ROW LEVEL SECURITY")
    op.execute(
        "CREATE POLICY keyword_posting_tenant_isolation ON keyword_posting "
        "USING (tenant_id = ANY (recalld_tenant_ids())) WITH CHECK (tenant_id = ANY (recalld_tenant_ids()))"
    )
    op.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON keyword_posting TO recalld_app")
