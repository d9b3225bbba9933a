"""Memories (facts, rules, episodes, document and code chunks), documents and scope settings.

One table for every kind: hybrid search ranks across kinds in one statement, and each kind's
columns are nullable with CHECK constraints saying which are required. Every retrieval bumps
reference_count (an unindexed column): fillfactor 80 leaves room on each page so those updates
stay HOT and never touch the HNSW, GIN or BM25 indexes.

Revision ID: 0002_memory
Revises: 0001_foundation
"""

from alembic import op
from sqlalchemy import text

revision = "0002_memory"
down_revision = "0001_foundation"
branch_labels = None
depends_on = None

RLS_TABLES = ("memory", "document", "scope_settings")


def _pg_textsearch_loadable() -> bool:
    bind = op.get_bind()
    available = bind.execute(
        text("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_textsearch'")
    ).scalar()
    preload = bind.execute(text("SELECT current_setting('shared_preload_libraries')")).scalar() or ""
    return bool(available) and "pg_textsearch" in str(preload)


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE memory (
            tenant_id uuid NOT NULL,
            id uuid NOT NULL,
            kind text NOT NULL,
            content text NOT NULL,
            -- What the keyword index sees: content plus CJK bigrams, split identifiers, symbols.
            search_text text NOT NULL,
            search_vector tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, search_text)) STORED,
            embedding vector(384),
            importance double precision NOT NULL DEFAULT 5,
            scope text NOT NULL DEFAULT 'global',
            tags text[] NOT NULL DEFAULT '{}',
            metadata jsonb NOT NULL DEFAULT '{}',
            created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            reference_count integer NOT NULL DEFAULT 0,
            last_referenced_at timestamptz,
            idempotency_key text,
            -- facts and rules
            subject text,
            predicate text,
            confidence double precision,
            decay_rate double precision,
            last_confirmed_at timestamptz,
            validity text,
            supersedes uuid,
            -- episodes
            butler text,
            session_id text,
            expires_at timestamptz,
            -- document and code chunks
            path text,
            start_line integer,
            end_line integer,
            content_hash text,
            repository text,
            symbol text,
            symbol_kind text,
            language text,
            parent_symbol text,
            CONSTRAINT memory_pkey PRIMARY KEY (tenant_id, id),
            CONSTRAINT memory_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenant (id) ON DELETE CASCADE,
            CONSTRAINT memory_kind_check CHECK (kind IN ('fact', 'rule', 'episode', 'document', 'code')),
            CONSTRAINT memory_importance_check CHECK (importance >= 0 AND importance <= 10),
            CONSTRAINT memory_confidence_check CHECK (confidence IS NULL OR (confidence >= 0 AND confidence <= 1)),
            CONSTRAINT memory_decay_rate_check CHECK (decay_rate IS NULL OR decay_rate >= 0),
            CONSTRAINT memory_validity_check
                CHECK (validity IS NULL OR validity IN ('active', 'superseded', 'retracted')),
            CONSTRAINT memory_fact_check CHECK (
                kind NOT IN ('fact', 'rule')
                OR (confidence IS NOT NULL AND decay_rate IS NOT NULL
                    AND last_confirmed_at IS NOT NULL AND validity IS NOT NULL)),
            CONSTRAINT memory_episode_check CHECK (kind <> 'episode' OR (butler IS NOT NULL AND expires_at IS NOT NULL)),
            CONSTRAINT memory_chunk_check CHECK (
                kind NOT IN ('document', 'code')
                OR (path IS NOT NULL AND start_line IS NOT NULL AND end_line IS NOT NULL))
        ) WITH (fillfactor = 80)
        """
    )
    op.execute("CREATE INDEX memory_tenant_kind_created_idx ON memory (tenant_id, kind, created_at DESC, id)")
    op.execute("CREATE INDEX memory_tenant_path_idx ON memory (tenant_id, path) WHERE path IS NOT NULL")
    op.execute(
        "CREATE UNIQUE INDEX memory_tenant_idempotency_key ON memory (tenant_id, idempotency_key) "
        "WHERE idempotency_key IS NOT NULL"
    )
    # GIN and HNSW cannot lead with tenant_id (no btree_gin; vector indexes take one column). Every
    # query still filters by tenant_id, and on Citus each shard holds its own copy of these indexes.
    op.execute("CREATE INDEX memory_search_vector_gin ON memory USING gin (search_vector)")
    op.execute(
        "CREATE INDEX memory_embedding_hnsw ON memory USING hnsw (embedding vector_cosine_ops) "
        "WITH (m = 16, ef_construction = 64)"
    )
    if _pg_textsearch_loadable():
        op.execute("CREATE EXTENSION IF NOT EXISTS pg_textsearch")
        op.execute(
            "CREATE INDEX memory_search_text_bm25 ON memory USING bm25 (search_text) "
            "WITH (text_config = 'english', k1 = 1.2, b = 0.75)"
        )

    op.execute(
        """
        CREATE TABLE document (
            tenant_id uuid NOT NULL,
            path text NOT NULL,
            content text NOT NULL,
            content_hash text NOT NULL,
            scope text NOT NULL DEFAULT 'global',
            updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            CONSTRAINT document_pkey PRIMARY KEY (tenant_id, path),
            CONSTRAINT document_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenant (id) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        """
        CREATE TABLE scope_settings (
            tenant_id uuid NOT NULL,
            scope text NOT NULL,
            settings jsonb NOT NULL,
            updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            CONSTRAINT scope_settings_pkey PRIMARY KEY (tenant_id, scope),
            CONSTRAINT scope_settings_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenant (id) ON DELETE CASCADE
        )
        """
    )
    for table in RLS_TABLES:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(
            f"CREATE POLICY {table}_tenant_isolation ON {table} "
            "USING (tenant_id = ANY (recalld_tenant_ids())) "
            "WITH CHECK (tenant_id = ANY (recalld_tenant_ids()))"
        )
        op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO recalld_app")


def downgrade() -> None:
    for table in reversed(RLS_TABLES):
        op.execute(f"DROP TABLE {table}")
