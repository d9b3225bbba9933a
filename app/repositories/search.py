"""SQL of the retrieval legs: semantic, keyword (BM25 / full text / ILIKE). Rank in SQL, fuse in Python.

The WHERE clause is assembled from fixed fragments; every user value travels as a $n parameter.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

from app.embeddings.base import Vector

BM25_INDEX = "memory_search_text_bm25"


@dataclass(frozen=True, slots=True)
class CandidateFilter:
    """Which rows a leg may return; mirrors the search request's filters."""

    tenant_ids: Sequence[str]
    kinds: Sequence[str]
    scope: str | None = None
    min_confidence: float = 0.2
    tags: Sequence[str] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    metadata: dict[str, Any] | None = None
    repository: str | None = None
    path_regex: str | None = None
    exclude_path_regex: str | None = None


@dataclass(frozen=True, slots=True)
class LegRow:
    """One ranked hit of one leg, with what fusion and decay need."""

    id: uuid.UUID
    score: float
    created_at: datetime
    path: str | None


@dataclass(slots=True)
class _Sql:
    params: list[Any] = field(default_factory=list)

    def bind(self, value: Any) -> str:
        self.params.append(value)
        return f"${len(self.params)}"


def _where(sql: _Sql, f: CandidateFilter) -> str:
    """The shared WHERE clause over alias m (tenant first: it is what RLS also enforces)."""
    clauses = [
        f"m.tenant_id = ANY({sql.bind([uuid.UUID(t) for t in f.tenant_ids])}::uuid[])",
        f"m.kind = ANY({sql.bind(list(f.kinds))}::text[])",
        "(m.kind <> 'episode' OR m.expires_at > now())",
        "(m.validity IS NULL OR m.validity = 'active')",
    ]
    if f.min_confidence > 0:
        clauses.append(
            "(m.confidence IS NULL OR m.confidence * exp(-m.decay_rate * "
            f"extract(epoch FROM now() - m.last_confirmed_at) / 86400.0) >= {sql.bind(f.min_confidence)})"
        )
    if f.scope is not None:
        scope = sql.bind(f.scope)
        clauses.append(
            f"((m.kind <> 'episode' AND m.scope IN ('global', {scope})) OR (m.kind = 'episode' AND m.butler = {scope}))"
        )
    if f.tags:
        clauses.append(f"m.tags @> {sql.bind(list(f.tags))}::text[]")
    if f.created_after is not None:
        clauses.append(f"m.created_at >= {sql.bind(f.created_after)}")
    if f.created_before is not None:
        clauses.append(f"m.created_at < {sql.bind(f.created_before)}")
    if f.metadata:
        clauses.append(f"m.metadata @> {sql.bind(f.metadata)}::jsonb")
    if f.repository is not None:
        clauses.append(f"m.repository = {sql.bind(f.repository)}")
    if f.path_regex is not None:
        clauses.append(f"m.path ~ {sql.bind(f.path_regex)}")
    if f.exclude_path_regex is not None:
        clauses.append(f"(m.path IS NULL OR m.path !~ {sql.bind(f.exclude_path_regex)})")
    return " AND ".join(clauses)


def _leg_rows(rows: Sequence[asyncpg.Record]) -> list[LegRow]:
    return [
        LegRow(id=r["id"], score=float(r["score"]), created_at=r["created_at"], path=r["path"]) for r in rows
    ]


async def search_by_vector(
    conn: asyncpg.Connection,
    *,
    f: CandidateFilter,
    query_vector: Vector,
    limit: int,
    exact: bool,
    min_similarity: float | None = None,
) -> list[LegRow]:
    """Nearest rows by cosine similarity (1 - distance).

    exact=True scans the tenant's rows (filtered through the btree) instead of HNSW: for a small
    tenant inside a big table, HNSW would find the global neighbours and the tenant filter would
    then drop nearly all of them. Ordering by `distance + 0` is what keeps the planner off HNSW.
    For big tenants the HNSW iterative scan (set per transaction) keeps going until enough
    neighbours pass the filter.
    """
    sql = _Sql()
    q = sql.bind(query_vector)
    where = _where(sql, f)
    order = f"(m.embedding <=> {q}) + 0" if exact else f"m.embedding <=> {q}"
    similarity = ""
    if min_similarity is not None:
        similarity = f" AND m.embedding <=> {q} <= 1 - {sql.bind(min_similarity)}"
    rows = await conn.fetch(
        f"SELECT m.id, 1 - (m.embedding <=> {q}) AS score, m.created_at, m.path FROM memory m "
        f"WHERE {where} AND m.embedding IS NOT NULL{similarity} "
        f"ORDER BY {order}, m.created_at DESC, m.id LIMIT {sql.bind(limit)}",
        *sql.params,
    )
    return _leg_rows(rows)


async def search_by_bm25(
    conn: asyncpg.Connection, *, f: CandidateFilter, candidate_tsquery: str, bm25_text: str, limit: int
) -> list[LegRow]:
    """BM25 scores from pg_textsearch (`<@>`, negative: lower is better) for the tenant's candidates.

    Candidates come from the GIN match on search_vector, inside the tenant and its filters, so a
    small tenant gets all its matches however many rows other tenants hold, and rows that do not
    match are never returned. pg_textsearch's own index scan is not used: it answers a global
    top-k that the tenant filter then thins out, and in 0.6.1 it returned wrong or no rows after a
    rebuild (see docs/benchmarks.md).
    """
    sql = _Sql()
    where = _where(sql, f)
    tsq = sql.bind(candidate_tsquery)
    bq = sql.bind(bm25_text)
    rows = await conn.fetch(
        f"SELECT id, score, created_at, path FROM ("
        f"  SELECT m.id, -(m.search_text <@> to_bm25query({bq}, '{BM25_INDEX}')) AS score, m.created_at, m.path "
        f"  FROM memory m WHERE {where} AND m.search_vector @@ to_tsquery('simple', {tsq})"
        f") s WHERE score > 0 ORDER BY score DESC, created_at DESC, id LIMIT {sql.bind(limit)}",
        *sql.params,
    )
    return _leg_rows(rows)


async def document_frequencies(
    conn: asyncpg.Connection, *, tenant_ids: Sequence[str], query_text: str
) -> list[tuple[str, int]]:
    """The query's English lexemes and how many of the tenants' rows contain each (GIN counts)."""
    rows = await conn.fetch(
        "SELECT q.lexeme, (SELECT count(*) FROM memory d WHERE d.tenant_id = ANY($1::uuid[]) "
        "AND d.search_vector @@ to_tsquery('simple', quote_literal(q.lexeme))) AS n "
        "FROM (SELECT DISTINCT lexeme FROM unnest(to_tsvector('english', $2))) q ORDER BY q.lexeme",
        [uuid.UUID(t) for t in tenant_ids],
        query_text,
    )
    return [(r["lexeme"], int(r["n"])) for r in rows]


async def search_by_fulltext(
    conn: asyncpg.Connection,
    *,
    f: CandidateFilter,
    candidate_tsquery: str,
    lexemes: Sequence[str],
    frequencies: Sequence[int],
    corpus_size: int,
    avg_doc_length: float,
    limit: int,
    k1: float = 1.2,
    b: float = 0.75,
) -> list[LegRow]:
    """BM25 computed over tsvectors with per-tenant statistics (no extension needed).

    idf uses the tenant's document frequencies (passed in), tf the lexeme's positions, and the
    length norm distinct lexemes against the tenant's mean. Candidates are the rows matching
    `candidate_tsquery` (pre-stemmed lexemes, 'simple' config), chosen by the caller.
    """
    sql = _Sql()
    where = _where(sql, f)
    rows = await conn.fetch(
        f"""
        WITH df AS (
            SELECT * FROM unnest({sql.bind(list(lexemes))}::text[], {sql.bind(list(frequencies))}::int[]) AS d(lexeme, n)
        ), cand AS (
            SELECT m.id, m.created_at, m.path, m.search_vector, length(m.search_vector) AS dl
            FROM memory m WHERE {where} AND m.search_vector @@ to_tsquery('simple', {sql.bind(candidate_tsquery)})
        )
        SELECT c.id, c.created_at, c.path,
               sum(ln(1 + ({sql.bind(corpus_size)}::float8 - df.n + 0.5) / (df.n + 0.5))
                   * cardinality(t.positions) * ({sql.bind(k1)}::float8 + 1)
                   / (cardinality(t.positions) + {sql.bind(k1)}::float8
                      * (1 - {sql.bind(b)}::float8 + {sql.bind(b)}::float8 * c.dl / {sql.bind(avg_doc_length)}::float8))
               ) AS score
        FROM cand c
        CROSS JOIN LATERAL unnest(c.search_vector) AS t
        JOIN df ON df.lexeme = t.lexeme
        GROUP BY c.id, c.created_at, c.path
        ORDER BY score DESC, c.created_at DESC, c.id
        LIMIT {sql.bind(limit)}
        """,
        *sql.params,
    )
    return _leg_rows(rows)


async def search_by_substring(
    conn: asyncpg.Connection, *, f: CandidateFilter, patterns: Sequence[str], limit: int
) -> list[LegRow]:
    """ILIKE fallback when the ranked tiers find nothing; score = share of patterns matched."""
    sql = _Sql()
    where = _where(sql, f)
    pats = sql.bind(list(patterns))
    rows = await conn.fetch(
        f"SELECT m.id, m.created_at, m.path, "
        f"  (SELECT count(*) FROM unnest({pats}::text[]) p WHERE m.content ILIKE p)::float8 "
        f"  / cardinality({pats}::text[]) AS score "
        f"FROM memory m WHERE {where} AND m.content ILIKE ANY({pats}::text[]) "
        f"ORDER BY score DESC, m.created_at DESC, m.id LIMIT {sql.bind(limit)}",
        *sql.params,
    )
    return _leg_rows(rows)
