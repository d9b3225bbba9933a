"""Memories that stay true: a duplicate key, valid time, and the supersession link both ways.

- `content_key`: SHA-256 of the normalised content (app.retrieval.duplicates) of facts, rules and
  episodes, so a write finds an active memory saying the same thing by index instead of by scan.
  Existing rows are keyed here with a copy of the write path's rule as it was at this revision (a
  migration is a snapshot and imports no live app code; tests/unit checks the copy still agrees).
- `valid_from` / `valid_to` of facts and rules: when the memory was true. Existing ones were true from
  when they were stored (a NULL valid_from, from a writer that predates this, also means created_at); a superseded one stopped being true when its successor was stored (where that
  successor still exists; otherwise its end stays unknown, and "as of" questions leave it out).
- `superseded_by`: the newer memory that replaced this one, so a supersession chain is walked both
  ways by index. Set here from the existing `supersedes` links.
- An index of each duplicate group's memories in time order, for the near-duplicate probe.

Nothing a stored memory means changes: validity, content and every other column stay as they were.

Revision ID: 0021_memory_truth
Revises: 0020_key_lifecycle
"""

import hashlib
import re
import unicodedata

from alembic import op
from sqlalchemy import text

revision = "0021_memory_truth"
down_revision = "0020_key_lifecycle"
branch_labels = None
depends_on = None

BATCH = 2000
_SPACE = re.compile(r"\s+")


def _content_key(content: str) -> bytes:
    # NFKC, case-folded, one space, trailing punctuation and space dropped; then SHA-256.
    folded = _SPACE.sub(" ", unicodedata.normalize("NFKC", content).casefold()).strip()
    end = len(folded)
    while end > 0 and (unicodedata.category(folded[end - 1]).startswith("P") or folded[end - 1].isspace()):
        end -= 1
    return hashlib.sha256(folded[:end].encode()).digest()


def upgrade() -> None:
    op.execute(
        "ALTER TABLE memory ADD COLUMN content_key bytea, ADD COLUMN valid_from timestamptz, "
        "ADD COLUMN valid_to timestamptz, ADD COLUMN superseded_by uuid"
    )
    bind = op.get_bind()
    # memory forces row-level security: this transaction may see every tenant's rows.
    bind.execute(
        text(
            "SELECT set_config('recalld.tenant_ids', coalesce(string_agg(id::text, ','), ''), true) FROM tenant"
        )
    )
    last: tuple[object, object] | None = None
    while True:
        after = "AND (tenant_id, id) > (:tenant_id, :id)" if last is not None else ""
        params = {} if last is None else {"tenant_id": last[0], "id": last[1]}
        rows = bind.execute(
            text(
                "SELECT tenant_id, id, content FROM memory WHERE kind IN ('fact', 'rule', 'episode') "
                f"{after} ORDER BY tenant_id, id LIMIT {BATCH}"
            ),
            params,
        ).all()
        if not rows:
            break
        bind.execute(
            text("UPDATE memory SET content_key = :key WHERE tenant_id = :tenant_id AND id = :id"),
            [{"tenant_id": r.tenant_id, "id": r.id, "key": _content_key(r.content)} for r in rows],
        )
        last = (rows[-1].tenant_id, rows[-1].id)
    op.execute("UPDATE memory SET valid_from = created_at WHERE kind IN ('fact', 'rule')")
    # The earliest successor that still exists ends the old memory's validity and is its link.
    op.execute(
        """
        UPDATE memory o SET valid_to = n.created_at, superseded_by = n.id
        FROM (SELECT DISTINCT ON (tenant_id, supersedes) tenant_id, supersedes, id, created_at
              FROM memory WHERE supersedes IS NOT NULL
              ORDER BY tenant_id, supersedes, created_at, id) n
        WHERE o.tenant_id = n.tenant_id AND o.id = n.supersedes AND o.validity = 'superseded'
        """
    )
    op.execute(
        "CREATE INDEX memory_tenant_content_key_idx ON memory (tenant_id, content_key) "
        "WHERE content_key IS NOT NULL"
    )
    op.execute(
        "CREATE INDEX memory_tenant_superseded_by_idx ON memory (tenant_id, superseded_by) "
        "WHERE superseded_by IS NOT NULL"
    )
    # The active facts a subject-and-predicate supersession replaces.
    op.execute(
        "CREATE INDEX memory_tenant_fact_predicate_idx ON memory (tenant_id, subject, predicate, scope) "
        "WHERE kind = 'fact' AND validity = 'active' AND predicate IS NOT NULL"
    )
    # The near-duplicate probe: a group's newest memories (kind, scope, subject or butler) without
    # walking every memory of the kind; conversation turns are never probed, so they are left out.
    op.execute(
        "CREATE INDEX memory_tenant_near_group_idx ON memory "
        "(tenant_id, kind, scope, (coalesce(subject, butler, '')), created_at DESC) "
        "WHERE content_key IS NOT NULL AND (kind <> 'episode' OR session_id IS NULL)"
    )


def downgrade() -> None:
    op.execute("DROP INDEX memory_tenant_near_group_idx")
    op.execute("DROP INDEX memory_tenant_fact_predicate_idx")
    op.execute("DROP INDEX memory_tenant_superseded_by_idx")
    op.execute("DROP INDEX memory_tenant_content_key_idx")
    op.execute(
        "ALTER TABLE memory DROP COLUMN content_key, "
        "DROP COLUMN valid_from, DROP COLUMN valid_to, DROP COLUMN superseded_by"
    )
