"""Per-tenant HNSW indexes on memory_vector instead of one HNSW index over every tenant's rows.

With one graph for the whole table, a tenant's filtered HNSW walk visits its neighbours' nodes: a
10,000-row tenant among 200,000 others had to be scanned exactly (9.7 ms server-side) where the
same tenant alone took 2.5 ms through HNSW. A partial index per tenant
(`WHERE tenant_id = '<tenant>'`) holds only that tenant's rows, so its walk costs what its own size
costs. The service (app/services/vector_indexes.py) builds them CONCURRENTLY as tenants pass
exact_scan_max_rows embedded rows and drops a deleted tenant's; this migration builds them for
the tenants already that big (2,000, the setting's default) and drops the global index, which
every insert also paid for (docs/benchmarks.md, "Per-tenant HNSW indexes").

Revision ID: 0015_tenant_vector_indexes
Revises: 0014_memory_vector
"""

import uuid

from alembic import op
from sqlalchemy import text

revision = "0015_tenant_vector_indexes"
down_revision = "0014_memory_vector"
branch_labels = None
depends_on = None

MIN_ROWS = 2000


def upgrade() -> None:
    op.execute("DROP INDEX memory_embedding_hnsw")
    bind = op.get_bind()
    # memory_vector forces row-level security: this transaction may see every tenant's rows.
    bind.execute(
        text(
            "SELECT set_config('recalld.tenant_ids', coalesce(string_agg(id::text, ','), ''), true) FROM tenant"
        )
    )
    tenants = bind.execute(
        text(
            "SELECT tenant_id FROM memory_vector GROUP BY tenant_id HAVING count(*) >= :min_rows ORDER BY tenant_id"
        ),
        {"min_rows": MIN_ROWS},
    ).scalars()
    for tenant in list(tenants):
        # DDL takes no parameters; the name and the literal are built from a uuid value, not text.
        tenant_id = uuid.UUID(str(tenant))
        op.execute(
            f"CREATE INDEX memory_vector_hnsw_{tenant_id.hex} ON memory_vector "
            f"USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64) "
            f"WHERE tenant_id = '{tenant_id}'::uuid"
        )


def downgrade() -> None:
    bind = op.get_bind()
    names = bind.execute(
        text(
            "SELECT c.relname FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid "
            "WHERE i.indrelid = 'memory_vector'::regclass AND c.relname LIKE 'memory_vector_hnsw_%'"
        )
    ).scalars()
    for name in list(names):
        # The names matched the pattern above: memory_vector_hnsw_ and hex digits only.
        op.execute(f'DROP INDEX "{name}"')
    op.execute(
        "CREATE INDEX memory_embedding_hnsw ON memory USING hnsw (embedding vector_cosine_ops) "
        "WITH (m = 16, ef_construction = 64)"
    )
