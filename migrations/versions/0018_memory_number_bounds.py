"""Stored numbers of a memory are 0 or at least 1e-6, and a decay rate at most 10 per day.

The API let a fact through with decay_rate 5e-324 (or confidence 5e-324), and PostgreSQL raises
on a float product that rounds to zero: from then on the confidence filter of every search and
recall of the tenant failed (SQLSTATE 22003). app/input_rules.py now refuses such numbers at the
door; this constraint is the same rule where the rows live, so the SQL arithmetic over them can
rely on it whatever wrote them. Values already stored in the gap are 0 in all but name (a rate
of 1e-300 per day is permanent) and become 0; nothing is clamped otherwise.

Revision ID: 0018_memory_number_bounds
Revises: 0017_embedding_model_recorded
"""

from alembic import op
from sqlalchemy import text

revision = "0018_memory_number_bounds"
down_revision = "0017_embedding_model_recorded"
branch_labels = None
depends_on = None

_SMALLEST = "1e-6"


def upgrade() -> None:
    bind = op.get_bind()
    # memory forces row-level security: this transaction may see (and fix) every tenant's rows.
    bind.execute(
        text(
            "SELECT set_config('recalld.tenant_ids', coalesce(string_agg(id::text, ','), ''), true) FROM tenant"
        )
    )
    for column in ("importance", "confidence", "decay_rate"):
        bind.execute(text(f"UPDATE memory SET {column} = 0 WHERE {column} > 0 AND {column} < {_SMALLEST}"))
    op.execute(
        f"""
        ALTER TABLE memory ADD CONSTRAINT memory_numbers_check CHECK (
            (importance = 0 OR importance >= {_SMALLEST})
            AND (confidence IS NULL OR confidence = 0 OR confidence >= {_SMALLEST})
            AND (decay_rate IS NULL OR decay_rate = 0 OR (decay_rate >= {_SMALLEST} AND decay_rate <= 10))
        )
        """
    )


def downgrade() -> None:
    op.execute("ALTER TABLE memory DROP CONSTRAINT memory_numbers_check")
