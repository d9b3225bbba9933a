"""Row-level security reads the request's tenant ids once per statement, not once per row.

The policies compared tenant_id with recalld_tenant_ids(), a STABLE SQL function that PostgreSQL
inlines: on every row a policy checked, it looked up the setting, split the string and parsed
each UUID again. A hybrid search checks a few hundred rows (the vector leg's 100 hits, the
keyword leg's candidate lookups, the reference bump), and that parsing was about 5 % of the legs'
time. As a scalar subquery the array becomes an InitPlan, computed once per statement. Which
rows a policy admits is unchanged: the same function, the same setting, read within one statement.

Revision ID: 0012_rls_tenant_ids_once
Revises: 0011_serving_role
"""

from alembic import op

revision = "0012_rls_tenant_ids_once"
down_revision = "0011_serving_role"
branch_labels = None
depends_on = None

# Every table whose policy is tenant_id = ANY (recalld_tenant_ids()) (0002, 0003, 0006, 0009, 0011).
TENANT_TABLES = (
    "memory",
    "document",
    "scope_settings",
    "code_file",
    "code_symbol",
    "code_edge",
    "keyword_posting",
    "keyword_lexeme_stat",
    "keyword_corpus_stat",
    "tenant_usage",
    "api_key",
)
ONCE = "(SELECT recalld_tenant_ids())::uuid[]"
PER_ROW = "recalld_tenant_ids()"


def _set(ids: str) -> None:
    for table in TENANT_TABLES:
        op.execute(
            f"ALTER POLICY {table}_tenant_isolation ON {table} "
            f"USING (tenant_id = ANY ({ids})) WITH CHECK (tenant_id = ANY ({ids}))"
        )
    op.execute(f"ALTER POLICY tenant_isolation ON tenant USING (id = ANY ({ids}))")


def upgrade() -> None:
    _set(ONCE)


def downgrade() -> None:
    _set(PER_ROW)
