"""SQL of the substring tier: ILIKE over a bounded window of recent rows, when BM25 finds nothing."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg

from app.repositories.search.filters import CandidateFilter, Sql, hits_of, where_clause
from app.retrieval.hits import Hit
from app.retrieval.scoring import TIE_BREAK_SQL

# The substring tier reads at most this many of the tenants' most recent rows, and of each at most
# this many characters: a query that matches nothing costs a bounded scan, not the whole tenant.
SUBSTRING_SCAN_ROWS = 2000
SUBSTRING_SCAN_CHARS = 4096
# Columns where() reads, selected from the recent-rows window so the filters apply to it.
_WINDOW_COLUMNS = (
    "id, tenant_id, kind, content, content_key, created_at, path, expires_at, validity, confidence, decay_rate, "
    "last_confirmed_at, scope, butler, tags, metadata, repository, valid_from, valid_to"
)


async def search_by_substring(
    conn: asyncpg.Connection, *, f: CandidateFilter, patterns: Sequence[str], limit: int
) -> list[Hit]:
    """ILIKE fallback when the ranked tiers find nothing; score = share of patterns matched.

    No index serves `ILIKE '%word%'`, so the tier looks only at a bounded window: the newest
    SUBSTRING_SCAN_ROWS rows per request (split over its tenants and kinds, each part one range of
    the (tenant_id, kind, created_at) index), and the first SUBSTRING_SCAN_CHARS of each row. The
    request's other filters apply within the window.
    """
    sql = Sql()
    per_part = max(100, SUBSTRING_SCAN_ROWS // max(1, len(f.tenant_ids) * len(f.kinds)))
    where = where_clause(sql, f)
    pats = sql.bind(list(patterns))
    head = f"substr(m.content, 1, {sql.bind(SUBSTRING_SCAN_CHARS)})"
    rows = await conn.fetch(
        f"SELECT m.id, m.created_at, m.path, m.content_key, "
        f"  (SELECT count(*) FROM unnest({pats}::text[]) p WHERE {head} ILIKE p)::float8 "
        f"  / cardinality({pats}::text[]) AS score "
        f"FROM unnest({sql.bind([uuid.UUID(t) for t in f.tenant_ids])}::uuid[]) AS t(id) "
        f"CROSS JOIN unnest({sql.bind(list(f.kinds))}::text[]) AS k(kind) "
        f"CROSS JOIN LATERAL (SELECT {_WINDOW_COLUMNS} FROM memory w "
        f"  WHERE w.tenant_id = t.id AND w.kind = k.kind "
        f"  ORDER BY w.created_at DESC, w.id LIMIT {sql.bind(per_part)}) AS m "
        f"WHERE {where} AND {head} ILIKE ANY({pats}::text[]) "
        f"ORDER BY score DESC, {TIE_BREAK_SQL} LIMIT {sql.bind(limit)}",
        *sql.params,
    )
    return hits_of(rows)
