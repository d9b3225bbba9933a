"""Memory script: the writing system of each memory's content, so search knows what the embedder can read.

The embedding model declares the scripts it was trained on (MiniLM-L6: Latin). A memory in another
script has a vector that is noise to that model, so the semantic leg leaves it to the keyword leg.
Existing rows are derived here with a copy of the rule the write path used at this revision
(`app.retrieval.language.dominant_script`): a migration is a snapshot and imports no live app code,
so a later change to that module cannot change what upgrading an old database does.

Revision ID: 0010_memory_script
Revises: 0009_write_limits
"""

import bisect
import re
from collections import Counter

from alembic import op
from sqlalchemy import text

revision = "0010_memory_script"
down_revision = "0009_write_limits"
branch_labels = None
depends_on = None

BATCH = 2000

# (first code point, last code point, script): letters only, as app.retrieval.language had them.
_RANGES: tuple[tuple[int, int, str], ...] = (
    (0x0041, 0x005A, "latin"),
    (0x0061, 0x007A, "latin"),
    (0x00C0, 0x024F, "latin"),  # Latin-1 letters, Latin Extended-A/B
    (0x0250, 0x02AF, "latin"),  # IPA extensions
    (0x0370, 0x03FF, "greek"),
    (0x0400, 0x052F, "cyrillic"),
    (0x0530, 0x058F, "armenian"),
    (0x0590, 0x05FF, "hebrew"),
    (0x0600, 0x06FF, "arabic"),
    (0x0700, 0x074F, "syriac"),
    (0x0750, 0x077F, "arabic"),  # Arabic supplement
    (0x0780, 0x07BF, "thaana"),
    (0x0900, 0x097F, "devanagari"),
    (0x0980, 0x09FF, "bengali"),
    (0x0A00, 0x0A7F, "gurmukhi"),
    (0x0A80, 0x0AFF, "gujarati"),
    (0x0B00, 0x0B7F, "oriya"),
    (0x0B80, 0x0BFF, "tamil"),
    (0x0C00, 0x0C7F, "telugu"),
    (0x0C80, 0x0CFF, "kannada"),
    (0x0D00, 0x0D7F, "malayalam"),
    (0x0D80, 0x0DFF, "sinhala"),
    (0x0E00, 0x0E7F, "thai"),
    (0x0E80, 0x0EFF, "lao"),
    (0x0F00, 0x0FFF, "tibetan"),
    (0x1000, 0x109F, "myanmar"),
    (0x10A0, 0x10FF, "georgian"),
    (0x1100, 0x11FF, "hangul"),
    (0x1200, 0x139F, "ethiopic"),
    (0x1780, 0x17FF, "khmer"),
    (0x1E00, 0x1EFF, "latin"),  # Latin Extended Additional (Vietnamese)
    (0x1F00, 0x1FFF, "greek"),
    (0x2C00, 0x2C5F, "glagolitic"),
    (0x2C60, 0x2C7F, "latin"),
    (0x2D80, 0x2DDF, "ethiopic"),
    (0x2DE0, 0x2DFF, "cyrillic"),
    (0x2E80, 0x2FDF, "han"),  # CJK radicals
    (0x3040, 0x309F, "hiragana"),
    (0x30A0, 0x30FF, "katakana"),
    (0x3100, 0x312F, "bopomofo"),
    (0x3130, 0x318F, "hangul"),
    (0x31F0, 0x31FF, "katakana"),
    (0x3400, 0x4DBF, "han"),
    (0x4E00, 0x9FFF, "han"),
    (0xA640, 0xA69F, "cyrillic"),
    (0xA720, 0xA7FF, "latin"),
    (0xAC00, 0xD7AF, "hangul"),
    (0xF900, 0xFAFF, "han"),
    (0xFB1D, 0xFB4F, "hebrew"),
    (0xFB50, 0xFDFF, "arabic"),  # presentation forms A
    (0xFE70, 0xFEFF, "arabic"),  # presentation forms B
    (0xFF21, 0xFF3A, "latin"),  # fullwidth
    (0xFF41, 0xFF5A, "latin"),
    (0xFF66, 0xFF9F, "katakana"),  # halfwidth
    (0xFFA0, 0xFFDC, "hangul"),
    (0x20000, 0x323AF, "han"),  # CJK extensions B–H
)
_STARTS = [start for start, _, _ in _RANGES]
_ASCII_LETTER = re.compile("[A-Za-z]")


def _char_script(char: str) -> str | None:
    if not char.isalpha():
        return None
    index = bisect.bisect_right(_STARTS, ord(char)) - 1
    if index >= 0:
        start, end, script = _RANGES[index]
        if start <= ord(char) <= end:
            return script
    return None


def _dominant_script(content: str) -> str | None:
    # Most letters win; ties go to the script whose first letter comes first.
    if content.isascii():
        return "latin" if _ASCII_LETTER.search(content) else None
    counts: Counter[str] = Counter(s for s in map(_char_script, content) if s is not None)
    if not counts:
        return None
    best = max(counts.values())
    return next(script for script in counts if counts[script] == best)


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
            if (script := _dominant_script(r.content)) is not None
        ]
        if updates:
            bind.execute(
                text("UPDATE memory SET script = :script WHERE tenant_id = :tenant_id AND id = :id"), updates
            )
        last = (rows[-1].tenant_id, rows[-1].id)


def downgrade() -> None:
    op.execute("ALTER TABLE memory DROP COLUMN script")
