"""Keyword postings in blocks: many memories per row, so postings take a sixth of the bytes.

keyword_posting held one row per (memory, lexeme), and every such row paid a 24-byte tuple header,
a line pointer and its uuids twice (heap and covering key): 1,440 bytes per memory at S2, more
than the memory row itself; converted into blocks, 234 (docs/benchmarks.md). Now:

- keyword_block holds a tenant's postings of one lexeme and impact bucket (31 − impact / 1024:
  bucket 0 holds the highest impacts) in blocks of up to BLOCK_SIZE: parallel arrays of memory
  ids, term frequencies and document lengths, best impact first. A query reads a lexeme's blocks in key order (best bucket
  first), as it read the old key backwards, and stops after its per-lexeme budget.
- keyword_posting stays, unchanged, as the delta: every write still inserts its own rows there
  (concurrent writers touch no shared row), and deletes of rows still in the delta remove them by
  key as before. About one inserted row in COMPACT_EVERY_ROWS (chosen by its id's hash, so no
  counter is read or written) moves its tenant's delta into blocks (keyword_compact), topping up
  the last, partial block of each lexeme and bucket. One compaction per tenant runs at a time
  (a try-lock: a writer that finds one running leaves its rows in the delta for the next).
- A memory deleted or re-indexed after its postings went into blocks is recorded in
  keyword_stale (its old lexemes and buckets): exact scoring leaves its block postings out, and
  the next compaction removes them from the blocks. A row's postings are all in the delta or all
  in blocks, so a delete that found its rows in the delta needs no stale record.

Revision ID: 0013_keyword_blocks
Revises: 0012_rls_tenant_ids_once
"""

from alembic import op

revision = "0013_keyword_blocks"
down_revision = "0012_rls_tenant_ids_once"
branch_labels = None
depends_on = None

BLOCK_SIZE = 64  # 64 postings (~1.5 kB) keep a block row under the 2 kB TOAST threshold
BUCKET_WIDTH = 1024  # impact is 0..32767: 32 buckets
# Bucket 0 holds the highest impacts, so the primary key's own order reads best first.
_BUCKET = f"(31 - {{impact}} / {BUCKET_WIDTH})::smallint"
COMPACT_EVERY_ROWS = 128  # a power of two: inserted rows per compaction of their tenant, on average

# The delta rows of `source` grouped into blocks numbered from each group's `first` block.
_BLOCKS_OF = f"""
    SELECT {{tenant}}, nb.lexeme, nb.bucket, {{first}} + (nb.rn / {BLOCK_SIZE})::int,
           array_agg(nb.memory_id ORDER BY nb.rn), array_agg(nb.tf ORDER BY nb.rn),
           array_agg(nb.dl ORDER BY nb.rn)
    FROM (
        SELECT p.*, row_number() OVER (PARTITION BY {{partition}} p.lexeme, p.bucket
                                       ORDER BY p.impact DESC, p.memory_id DESC) - 1 AS rn
        FROM {{source}} p
    ) nb {{join}}
    GROUP BY {{group}} nb.lexeme, nb.bucket, nb.rn / {BLOCK_SIZE}
"""
_INSERT_BLOCKS = "INSERT INTO keyword_block (tenant_id, lexeme, bucket, block, memory_ids, term_frequencies, document_lengths)"
_OLD_ROW_POSTINGS = """
    SELECT t.lexeme, keyword_impact(greatest(coalesce(cardinality(t.positions), 1), 1),
                                    length({row}.search_vector)) AS impact
    FROM unnest({row}.search_vector) AS t
"""


def _old_row_trigger(*, stale: bool) -> str:
    """keyword_postings_of_old_row(): the delete/update trigger, with or without stale records."""
    record = (
        f"""
            GET DIAGNOSTICS removed = ROW_COUNT;
            -- Nothing in the delta: the row's postings are in blocks (a row of a vanishing
            -- tenant has none left to mark; its blocks go with the cascade).
            IF removed = 0 AND EXISTS (SELECT 1 FROM tenant WHERE id = OLD.tenant_id) THEN
                INSERT INTO keyword_stale (tenant_id, memory_id, lexeme, bucket)
                SELECT OLD.tenant_id, OLD.id, o.lexeme, {_BUCKET.format(impact="o.impact")}
                FROM ({_OLD_ROW_POSTINGS.format(row="OLD")}) o
                ON CONFLICT DO NOTHING;
            END IF;"""
        if stale
        else ""
    )
    return f"""
        CREATE OR REPLACE FUNCTION keyword_postings_of_old_row() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            removed bigint;
        BEGIN
            DELETE FROM keyword_posting p
            USING ({_OLD_ROW_POSTINGS.format(row="OLD")}) o
            WHERE p.tenant_id = OLD.tenant_id AND p.lexeme = o.lexeme AND p.impact = o.impact
              AND p.memory_id = OLD.id;{record}
            IF TG_OP = 'UPDATE' THEN
                INSERT INTO keyword_posting (tenant_id, lexeme, impact, memory_id, term_frequency, document_length)
                SELECT NEW.tenant_id, t.lexeme,
                       keyword_impact(greatest(coalesce(cardinality(t.positions), 1), 1), length(NEW.search_vector)),
                       NEW.id, greatest(coalesce(cardinality(t.positions), 1), 1), length(NEW.search_vector)
                FROM unnest(NEW.search_vector) AS t;
                INSERT INTO keyword_lexeme_stat AS s (tenant_id, lexeme, stripe, documents)
                SELECT n.tenant_id, t.lexeme, keyword_stripe(), sum(n.sign)
                FROM (SELECT OLD.tenant_id, OLD.search_vector, -1 AS sign
                      UNION ALL SELECT NEW.tenant_id, NEW.search_vector, 1) n
                CROSS JOIN LATERAL unnest(tsvector_to_array(n.search_vector)) AS t(lexeme)
                GROUP BY n.tenant_id, t.lexeme ORDER BY n.tenant_id, t.lexeme
                ON CONFLICT (tenant_id, lexeme, stripe) DO UPDATE SET documents = s.documents + excluded.documents;
                INSERT INTO keyword_corpus_stat AS s (tenant_id, stripe, documents, total_length)
                VALUES (NEW.tenant_id, keyword_stripe(), 0, length(NEW.search_vector) - length(OLD.search_vector))
                ON CONFLICT (tenant_id, stripe) DO UPDATE SET total_length = s.total_length + excluded.total_length;
            END IF;
            RETURN NULL;
        END
        $$
    """


def _new_rows_trigger(*, compact: bool) -> str:
    """keyword_index_new_rows(): the statement-level insert trigger, with or without compaction."""
    maybe_compact = (
        f"""
            -- About one row in COMPACT_EVERY_ROWS (by its id's hash) starts a compaction of its
            -- tenant: no count of the delta on every write (counting it halved ingest).
            FOR tenant IN SELECT DISTINCT n.tenant_id FROM new_rows n
                          WHERE hashtext(n.id::text) & {COMPACT_EVERY_ROWS - 1} = 0 LOOP
                PERFORM keyword_compact(tenant);
            END LOOP;"""
        if compact
        else ""
    )
    return f"""
        CREATE OR REPLACE FUNCTION keyword_index_new_rows() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            tenant uuid;
        BEGIN
            INSERT INTO keyword_posting (tenant_id, lexeme, impact, memory_id, term_frequency, document_length)
            SELECT n.tenant_id, t.lexeme,
                   keyword_impact(greatest(coalesce(cardinality(t.positions), 1), 1), length(n.search_vector)),
                   n.id, greatest(coalesce(cardinality(t.positions), 1), 1), length(n.search_vector)
            FROM new_rows n CROSS JOIN LATERAL unnest(n.search_vector) AS t
            ORDER BY 1, 2, 3, 4;
            INSERT INTO keyword_lexeme_stat AS s (tenant_id, lexeme, stripe, documents)
            SELECT n.tenant_id, t.lexeme, keyword_stripe(), count(*)
            FROM new_rows n CROSS JOIN LATERAL unnest(tsvector_to_array(n.search_vector)) AS t(lexeme)
            GROUP BY n.tenant_id, t.lexeme ORDER BY n.tenant_id, t.lexeme
            ON CONFLICT (tenant_id, lexeme, stripe) DO UPDATE SET documents = s.documents + excluded.documents;
            INSERT INTO keyword_corpus_stat AS s (tenant_id, stripe, documents, total_length)
            SELECT n.tenant_id, keyword_stripe(), count(*), sum(length(n.search_vector))
            FROM new_rows n GROUP BY n.tenant_id ORDER BY n.tenant_id
            ON CONFLICT (tenant_id, stripe) DO UPDATE
            SET documents = s.documents + excluded.documents, total_length = s.total_length + excluded.total_length;{maybe_compact}
            RETURN NULL;
        END
        $$
    """


# The moved delta plus the partial tails it tops up, numbered on from each group's tail.
_MOVED_INTO_BLOCKS = _BLOCKS_OF.format(
    tenant="tenant",
    partition="",
    source="postings",
    first=f"CASE WHEN g.block IS NULL THEN 0 WHEN g.n < {BLOCK_SIZE} THEN g.block ELSE g.block + 1 END",
    join="JOIN groups g ON g.lexeme = nb.lexeme AND g.bucket = nb.bucket",
    group="g.block, g.n,",
)
# Blocks are found one (lexeme, bucket) at a time, by key (LATERAL, index scans only), and
# deleted by the tuple ids found. PL/pgSQL plans once per connection, often while keyword_block is
# still empty (a new database's first batch); a join planned then scanned every block of the
# tenant per lexeme and took SciFact's first 256-abstract batch past the 60 s statement timeout.
_COMPACT = f"""
    CREATE FUNCTION keyword_compact(tenant uuid) RETURNS void LANGUAGE plpgsql SET enable_seqscan = off AS $$
    BEGIN
        -- One compaction per tenant at a time; a writer that finds one running does not wait.
        IF NOT pg_try_advisory_xact_lock(hashtextextended('keyword_compact ' || tenant::text, 0)) THEN
            RETURN;
        END IF;
        -- Stale postings out of their blocks first: a re-indexed row's new postings (in the
        -- delta) may share a lexeme and bucket with its old ones.
        WITH gone AS (
            DELETE FROM keyword_stale s WHERE s.tenant_id = tenant RETURNING s.lexeme, s.bucket, s.memory_id
        ), g AS (
            SELECT lexeme, bucket, array_agg(memory_id) AS ids FROM gone GROUP BY lexeme, bucket
        ), found AS (
            SELECT k.tid FROM g CROSS JOIN LATERAL (
                SELECT k.ctid AS tid FROM keyword_block k
                WHERE k.tenant_id = tenant AND k.lexeme = g.lexeme AND k.bucket = g.bucket AND k.memory_ids && g.ids
            ) k
        ), hit AS (
            DELETE FROM keyword_block k WHERE k.ctid = ANY (ARRAY(SELECT tid FROM found))
            RETURNING k.lexeme, k.bucket, k.block, k.memory_ids, k.term_frequencies, k.document_lengths
        )
        {_INSERT_BLOCKS}
        SELECT tenant, h.lexeme, h.bucket, h.block, f.ids, f.tfs, f.dls
        FROM hit h JOIN g ON g.lexeme = h.lexeme AND g.bucket = h.bucket
        CROSS JOIN LATERAL (
            SELECT array_agg(u.id ORDER BY u.o) AS ids, array_agg(u.tf ORDER BY u.o) AS tfs,
                   array_agg(u.dl ORDER BY u.o) AS dls
            FROM unnest(h.memory_ids, h.term_frequencies, h.document_lengths) WITH ORDINALITY AS u(id, tf, dl, o)
            WHERE u.id <> ALL (g.ids)
        ) f
        WHERE f.ids IS NOT NULL;
        -- The delta into blocks: each lexeme and bucket tops up its last block when that is
        -- partial, then continues in new ones.
        WITH moved AS (
            DELETE FROM keyword_posting p WHERE p.tenant_id = tenant
            RETURNING p.lexeme, {_BUCKET.format(impact="p.impact")} AS bucket, p.impact, p.memory_id,
                      p.term_frequency AS tf, p.document_length AS dl
        ), groups AS (
            SELECT g.lexeme, g.bucket, k.block, k.tid, coalesce(cardinality(k.memory_ids), 0) AS n
            FROM (SELECT DISTINCT lexeme, bucket FROM moved) g
            LEFT JOIN LATERAL (
                SELECT k.block, k.ctid AS tid, k.memory_ids FROM keyword_block k
                WHERE k.tenant_id = tenant AND k.lexeme = g.lexeme AND k.bucket = g.bucket
                ORDER BY k.block DESC LIMIT 1
            ) k ON true
        ), tails AS (
            DELETE FROM keyword_block k
            WHERE k.ctid = ANY (ARRAY(SELECT tid FROM groups WHERE n < {BLOCK_SIZE}))
            RETURNING k.lexeme, k.bucket, k.memory_ids, k.term_frequencies, k.document_lengths
        ), postings AS (
            SELECT lexeme, bucket, impact, memory_id, tf, dl FROM moved
            UNION ALL
            SELECT t.lexeme, t.bucket, keyword_impact(u.tf, u.dl), u.id, u.tf, u.dl
            FROM tails t CROSS JOIN LATERAL unnest(t.memory_ids, t.term_frequencies, t.document_lengths) AS u(id, tf, dl)
        )
        {_INSERT_BLOCKS}
        {_MOVED_INTO_BLOCKS};
    END
    $$
"""


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE keyword_block (
            tenant_id uuid NOT NULL,
            lexeme text NOT NULL,
            -- 31 - keyword_impact / 1024, so key order is best first; within a bucket impacts
            -- differ by < 3 %, and blocks appended later come after the bucket's older ones.
            bucket smallint NOT NULL,
            block integer NOT NULL,
            memory_ids uuid[] NOT NULL,
            term_frequencies smallint[] NOT NULL,
            document_lengths integer[] NOT NULL,
            CONSTRAINT keyword_block_pkey PRIMARY KEY (tenant_id, lexeme, bucket, block),
            CONSTRAINT keyword_block_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenant (id) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        """
        CREATE TABLE keyword_stale (
            tenant_id uuid NOT NULL,
            memory_id uuid NOT NULL,
            lexeme text NOT NULL,
            bucket smallint NOT NULL,
            CONSTRAINT keyword_stale_pkey PRIMARY KEY (tenant_id, memory_id, lexeme, bucket),
            CONSTRAINT keyword_stale_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenant (id) ON DELETE CASCADE
        )
        """
    )
    op.execute(_COMPACT)
    # Existing postings into blocks, in one pass (the owner converts: RLS is not forced on it here).
    op.execute("ALTER TABLE keyword_posting NO FORCE ROW LEVEL SECURITY")
    op.execute(
        f"{_INSERT_BLOCKS} "
        + _BLOCKS_OF.format(
            tenant="nb.tenant_id",
            partition="p.tenant_id,",
            source=f"(SELECT k.*, {_BUCKET.format(impact='k.impact')} AS bucket, k.term_frequency AS tf, "
            "k.document_length AS dl FROM keyword_posting k)",
            first="0",
            join="",
            group="nb.tenant_id,",
        )
    )
    op.execute("TRUNCATE keyword_posting")
    op.execute("ALTER TABLE keyword_posting FORCE ROW LEVEL SECURITY")
    op.execute(_old_row_trigger(stale=True))
    op.execute(_new_rows_trigger(compact=True))
    for table in ("keyword_block", "keyword_stale"):
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(
            # The tenant ids once per statement, as 0012_rls_tenant_ids_once made every policy.
            f"CREATE POLICY {table}_tenant_isolation ON {table} "
            "USING (tenant_id = ANY ((SELECT recalld_tenant_ids())::uuid[])) "
            "WITH CHECK (tenant_id = ANY ((SELECT recalld_tenant_ids())::uuid[]))"
        )
        op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO recalld_app")
    op.execute("GRANT EXECUTE ON FUNCTION keyword_compact(uuid) TO recalld_app")


def downgrade() -> None:
    op.execute("ALTER TABLE keyword_posting NO FORCE ROW LEVEL SECURITY")
    op.execute(
        "INSERT INTO keyword_posting (tenant_id, lexeme, impact, memory_id, term_frequency, document_length) "
        "SELECT k.tenant_id, k.lexeme, keyword_impact(u.tf, u.dl), u.id, u.tf, u.dl "
        "FROM keyword_block k CROSS JOIN LATERAL unnest(k.memory_ids, k.term_frequencies, k.document_lengths) "
        "AS u(id, tf, dl) "
        "WHERE NOT EXISTS (SELECT 1 FROM keyword_stale s WHERE s.tenant_id = k.tenant_id AND s.memory_id = u.id) "
        "ORDER BY 1, 2, 3, 4"
    )
    op.execute("ALTER TABLE keyword_posting FORCE ROW LEVEL SECURITY")
    op.execute(_new_rows_trigger(compact=False))
    op.execute(_old_row_trigger(stale=False))
    op.execute("DROP FUNCTION keyword_compact(uuid)")
    op.execute("DROP TABLE keyword_stale")
    op.execute("DROP TABLE keyword_block")
