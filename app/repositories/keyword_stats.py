"""BM25 statistics of a query's terms, read from the per-tenant statistics the write triggers keep."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg

# N, avgdl and each query lexeme's df and idf, from the statistics the write triggers keep (migration
# 0006): a few indexed rows per lexeme, whatever the tenant's size. $1 query text, $2 tenants.
# `terms` holds every distinct query lexeme, one no memory holds with df = 0 and the largest idf
# there is (calibration's evidence: a query whose rare terms are absent can reach only a small
# part of what its terms could score); `w`, the ones BM25 scores with.
BM25_STATS = """
    q AS (SELECT DISTINCT unnest(tsvector_to_array(to_tsvector('english', $1))) AS lexeme),
    corpus AS MATERIALIZED (
        SELECT greatest(sum(documents), 1)::float8 AS n,
               greatest(sum(total_length)::float8 / greatest(sum(documents), 1), 1) AS avgdl
        FROM keyword_corpus_stat WHERE tenant_id = ANY($2::uuid[])
    ), terms AS MATERIALIZED (
        SELECT q.lexeme, df.n AS df, ln(1 + (greatest(c.n, df.n) - df.n + 0.5) / (df.n + 0.5)) AS idf
        FROM q CROSS JOIN corpus c CROSS JOIN LATERAL (
            SELECT coalesce(sum(s.documents), 0)::float8 AS n FROM keyword_lexeme_stat s
            WHERE s.tenant_id = ANY($2::uuid[]) AND s.lexeme = q.lexeme
        ) df
    ), w AS MATERIALIZED (SELECT * FROM terms WHERE df > 0)"""

# Every query lexeme's idf, largest first (a column of the keyword leg's rows, and query_term_idf).
QUERY_IDFS = "(SELECT array_agg(idf ORDER BY idf DESC) FROM terms)"


async def query_term_idf(
    conn: asyncpg.Connection, *, tenant_ids: Sequence[str], query_text: str
) -> list[float]:
    """BM25's idf of each distinct query lexeme in the tenants, a lexeme they never hold included."""
    idfs = await conn.fetchval(
        f"WITH {BM25_STATS} SELECT {QUERY_IDFS}", query_text, [uuid.UUID(t) for t in tenant_ids]
    )
    return [float(idf) for idf in idfs or []]
