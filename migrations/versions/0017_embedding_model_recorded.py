"""Record the embedding model of a deployment that stored vectors before the dimension followed the model.

From this revision the embedding columns take the configured model's dimension at the first start
(app/startup.py: `vector(n)`, or `halfvec(n)` past 2,000) and the model is recorded in
system_config. A database that already holds vectors but no record was served by the only model
an earlier recalld could run at vector(384): the local all-MiniLM-L6-v2. Recording it keeps such a
database serving as before, and makes a start with another model a clear error, not a mix.

Revision ID: 0017_embedding_model_recorded
Revises: 0016_keyword_impact_integer
"""

from alembic import op
from sqlalchemy import text

revision = "0017_embedding_model_recorded"
down_revision = "0016_keyword_impact_integer"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    # memory forces row-level security: this transaction may see every tenant's rows.
    bind.execute(
        text(
            "SELECT set_config('recalld.tenant_ids', coalesce(string_agg(id::text, ','), ''), true) FROM tenant"
        )
    )
    bind.execute(
        text(
            "INSERT INTO system_config (key, value) "
            """SELECT 'embedding', '{"provider": "local", "model": "all-MiniLM-L6-v2", "dim": 384}'::jsonb """
            "WHERE EXISTS (SELECT 1 FROM memory WHERE embedding IS NOT NULL) "
            "ON CONFLICT (key) DO NOTHING"
        )
    )


def downgrade() -> None:
    # The record is what earlier revisions' code compares too (provider, model, dim): it stays.
    pass
