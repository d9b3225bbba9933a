"""Deleting a tenant no longer fails on its keyword statistics.

0006's delete trigger subtracted deleted rows from keyword_lexeme_stat / keyword_corpus_stat by
upserting negative deltas. When the rows go because their tenant is deleted (ON DELETE CASCADE),
those upserts inserted statistics rows for a tenant that no longer exists and the foreign key
refused them, so the tenant could not be deleted at all. The statistics of a vanished tenant are
removed by the same cascade, so the trigger now skips them.

Revision ID: 0008_keyword_stats_tenant_delete
Revises: 0007_episode_session_order
"""

from alembic import op

revision = "0008_keyword_stats_tenant_delete"
down_revision = "0007_episode_session_order"
branch_labels = None
depends_on = None


def _unindex(source: str) -> str:
    return f"""
        CREATE OR REPLACE FUNCTION keyword_unindex_old_rows() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO keyword_lexeme_stat AS s (tenant_id, lexeme, stripe, documents)
            SELECT n.tenant_id, t.lexeme, keyword_stripe(), -count(*)
            FROM {source} n CROSS JOIN LATERAL unnest(tsvector_to_array(n.search_vector)) AS t(lexeme)
            GROUP BY n.tenant_id, t.lexeme ORDER BY n.tenant_id, t.lexeme
            ON CONFLICT (tenant_id, lexeme, stripe) DO UPDATE SET documents = s.documents + excluded.documents;
            INSERT INTO keyword_corpus_stat AS s (tenant_id, stripe, documents, total_length)
            SELECT n.tenant_id, keyword_stripe(), -count(*), -sum(length(n.search_vector))
            FROM {source} n GROUP BY n.tenant_id ORDER BY n.tenant_id
            ON CONFLICT (tenant_id, stripe) DO UPDATE
            SET documents = s.documents + excluded.documents, total_length = s.total_length + excluded.total_length;
            RETURN NULL;
        END
        $$
    """


def upgrade() -> None:
    op.execute(
        _unindex("(SELECT * FROM old_rows o WHERE EXISTS (SELECT 1 FROM tenant t WHERE t.id = o.tenant_id))")
    )


def downgrade() -> None:
    op.execute(_unindex("old_rows"))
