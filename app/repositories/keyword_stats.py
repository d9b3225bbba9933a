"""BM25 statistics of a query's terms, read from the per-tenant statistics the write triggers keep."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import asyncpg


async def query_term_idf(
    conn: asyncpg.Connection, *, tenant_ids: Sequence[str], query_text: str
) -> list[float]:
    """BM25's idf of each distinct query lexeme in the tenants, a lexeme they never hold included.

    A lexeme no memory holds gets the idf of df = 0, the largest there is: a query whose rare terms
    are absent can reach only a small part of what its terms could score (calibration's evidence).
    """
    rows = await conn.fetch(
        """
        WITH q AS (SELECT DISTINCT unnest(tsvector_to_array(to_tsvector('english', $1))) AS lexeme),
        corpus AS (
            SELECT greatest(sum(documents), 1)::float8 AS n FROM keyword_corpus_stat
            WHERE tenant_id = ANY($2::uuid[])
        )
        SELECT ln(1 + (greatest(c.n, df.n) - df.n + 0.5) / (df.n + 0.5)) AS idf
        FROM q CROSS JOIN corpus c CROSS JOIN LATERAL (
            SELECT coalesce(sum(s.documents), 0)::float8 AS n FROM keyword_lexeme_stat s
            WHERE s.tenant_id = ANY($2::uuid[]) AND s.lexeme = q.lexeme
        ) df
        ORDER BY idf DESC
        """,
        query_text,
        [uuid.UUID(t) for t in tenant_ids],
    )
    return [float(r["idf"]) for r in rows]
