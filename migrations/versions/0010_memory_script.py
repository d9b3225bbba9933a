"""Memory script: the writing system of each memory's content, so search knows what the embedder can read.

The embedding model declares the scripts it was trained on (MiniLM-L6: Latin). A memory in another
script has a vector that is noise to that model, so the semantic leg leaves it to the keyword leg.
Existing rows are derived here, with the same function the write path uses.

Revision ID: 0010_memory_script
Revises: 0009_write_limits
"""

from alembic import op
from sqlalchemy import text

from app.retrieval.language import dominant_script

revision = "0010_memory_script"
down_revision = "0009_write_limits"
branch_labels = None
depends_on = None

BATCH = 2000


def upgrade() -> None:
    op.execute("ALTER TABLE memory ADD COLUMN script text")
    bind = op.get_bind()
    # memory forces row-level security: this transaction may see every tenant's rows.
    bind.execute(
        text(
            "SELECT set_config('recalld.tenant_ids', coalesce(string_agg(id::text, ','), ''), true) FROM tenant"
        )
    )
    last: tuple[object, object] | None = None
    while True:
        after = "" if last is None else "WHERE (tenant_id, id) > (:tenant_id, :id)"
        params = {} if last is None else {"tenant_id": last[0], "id": last[1]}
        rows = bind.execute(
            text(f"SELECT tenant_id, id, content FROM memory {after} ORDER BY tenant_id, id LIMIT {BATCH}"),
            params,
        ).all()
        if not rows:
            break
        updates = [
            {"tenant_id": r.tenant_id, "id": r.id, "script": script}
            for r in rows
            if (script := dominant_script(r.content)) is not None
        ]
        if updates:
            bind.execute(
                text("UPDATE memory SET script = :script WHERE tenant_id = :tenant_id AND id = :id"), updates
            )
        last = (rows[-1].tenant_id, rows[-1].id)


def downgrade() -> None:
    op.execute("ALTER TABLE memory DROP COLUMN script")
