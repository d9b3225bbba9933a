"""Episodes in session order: the index behind a search hit's conversation `context`.

A hit's neighbouring turns are the few rows before and after it in (session_id, created_at, id)
order; with this index each side is one short range scan, however long the conversation or the
tenant's history.

Revision ID: 0007_episode_session_order
Revises: 0006_keyword_impact_postings
"""

from alembic import op

revision = "0007_episode_session_order"
down_revision = "0006_keyword_impact_postings"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX memory_episode_session_idx ON memory (tenant_id, session_id, created_at, id) "
        "WHERE kind = 'episode' AND session_id IS NOT NULL"
    )


def downgrade() -> None:
    op.execute("DROP INDEX memory_episode_session_idx")
