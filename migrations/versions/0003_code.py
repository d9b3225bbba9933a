"""Code index: indexed files, declared symbols and reference edges per tenant and repository.

Code chunks themselves are memory rows (kind 'code'), so they share search, fusion and tenancy.
These tables make "who calls", "what implements" and multi-hop questions plain SQL.

Revision ID: 0003_code
Revises: 0002_memory
"""

from alembic import op

revision = "0003_code"
down_revision = "0002_memory"
branch_labels = None
depends_on = None

TABLES = ("code_file", "code_symbol", "code_edge")


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE code_file (
            tenant_id uuid NOT NULL,
            repository text NOT NULL,
            path text NOT NULL,
            content_hash text NOT NULL,
            language text,
            updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
            CONSTRAINT code_file_pkey PRIMARY KEY (tenant_id, repository, path),
            CONSTRAINT code_file_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenant (id) ON DELETE CASCADE
        )
        """
    )
    op.execute(
        """
        CREATE TABLE code_symbol (
            tenant_id uuid NOT NULL,
            id uuid NOT NULL,
            repository text NOT NULL,
            path text NOT NULL,
            chunk_id uuid NOT NULL,
            name text NOT NULL,
            symbol_kind text NOT NULL,
            parent_symbol text,
            start_line integer NOT NULL,
            end_line integer NOT NULL,
            CONSTRAINT code_symbol_pkey PRIMARY KEY (tenant_id, id),
            CONSTRAINT code_symbol_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenant (id) ON DELETE CASCADE
        )
        """
    )
    op.execute("CREATE INDEX code_symbol_name_idx ON code_symbol (tenant_id, repository, name)")
    op.execute("CREATE INDEX code_symbol_parent_idx ON code_symbol (tenant_id, repository, parent_symbol)")
    op.execute("CREATE INDEX code_symbol_path_idx ON code_symbol (tenant_id, repository, path)")
    op.execute(
        """
        CREATE TABLE code_edge (
            tenant_id uuid NOT NULL,
            id uuid NOT NULL,
            repository text NOT NULL,
            path text NOT NULL,
            chunk_id uuid NOT NULL,
            source_symbol text,
            target_name text NOT NULL,
            relation text NOT NULL,
            line integer NOT NULL,
            CONSTRAINT code_edge_pkey PRIMARY KEY (tenant_id, id),
            CONSTRAINT code_edge_tenant_fkey FOREIGN KEY (tenant_id) REFERENCES tenant (id) ON DELETE CASCADE,
            CONSTRAINT code_edge_relation_check
                CHECK (relation IN ('calls', 'inherits', 'conforms', 'extends', 'imports'))
        )
        """
    )
    op.execute(
        "CREATE INDEX code_edge_target_idx ON code_edge (tenant_id, repository, target_name, relation)"
    )
    op.execute("CREATE INDEX code_edge_chunk_idx ON code_edge (tenant_id, chunk_id)")
    op.execute("CREATE INDEX code_edge_path_idx ON code_edge (tenant_id, repository, path)")
    op.execute(
        "CREATE INDEX memory_tenant_repository_path_idx ON memory (tenant_id, repository, path) WHERE kind = 'code'"
    )
    op.execute("CREATE INDEX memory_tenant_symbol_idx ON memory (tenant_id, symbol) WHERE kind = 'code'")
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(
            f"CREATE POLICY {table}_tenant_isolation ON {table} "
            "USING (tenant_id = ANY (recalld_tenant_ids())) "
            "WITH CHECK (tenant_id = ANY (recalld_tenant_ids()))"
        )
        op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO recalld_app")


def downgrade() -> None:
    op.execute("DROP INDEX memory_tenant_symbol_idx")
    op.execute("DROP INDEX memory_tenant_repository_path_idx")
    for table in reversed(TABLES):
        op.execute(f"DROP TABLE {table}")
