"""SQL of the retrieval legs: semantic, keyword (BM25 over postings / ILIKE). Rank in SQL, fuse in Python.

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
from app.retrieval.scoring import TIE_BREAK_SQL


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
        # confidence · exp(−rate · days) ≥ min, rearranged: exp() underflows (an error in
        # PostgreSQL) for a fact that has faded long ago, and one such row broke every search.
        clauses.append(
            "(m.confidence IS NULL OR (m.confidence > 0 AND m.decay_rate * "
            "extract(epoch FROM now() - m.last_confirmed_at) / 86400.0 "
            f"<= ln(m.confidence / {sql.bind(f.min_confidence)}::float8)))"
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
        f"ORDER BY {order}, {TIE_BREAK_SQL} LIMIT {sql.bind(limit)}",
        *sql.params,
    )
    return _leg_rows(rows)


@dataclass(frozen=True, slots=True)
class KeywordRows:
    """A BM25 leg's rows, and whether the candidate cut may have hidden rows the filters keep."""

    rows: list[LegRow]
    truncated: bool


async def search_by_bm25(
    conn: asyncpg.Connection,
    *,
    f: CandidateFilter,
    query_text: str,
    corpus_size: int,
    avg_doc_length: float,
    limit: int,
    candidates: int | None,
    k1: float = 1.2,
    b: float = 0.75,
) -> KeywordRows:
    """BM25 over the tenants' keyword postings: only rows holding a query lexeme, best first.

    Document frequencies, N and avgdl are the tenants' own, so other tenants' text never moves a
    score. The postings' top `candidates` (None: all) are then joined to memory for the filters;
    `truncated` says the cut was reached, so a caller short of `limit` rows can ask for all.
    """
    sql = _Sql()
    where = _where(sql, f)
    tenants = sql.bind([uuid.UUID(t) for t in f.tenant_ids])
    # BM25's tf part is tf·(k1+1) / (tf + k1·(1−b) + k1·b/avgdl · dl); the constants are folded
    # here and the (k1+1) factor applied to the final sum, so each posting costs three float ops.
    length_free, per_length = sql.bind(k1 * (1 - b)), sql.bind(k1 * b / max(avg_doc_length, 1e-9))
    rows = await conn.fetch(
        f"""
        WITH q AS (
            SELECT DISTINCT unnest(tsvector_to_array(to_tsvector('english', {sql.bind(query_text)}))) AS lexeme
        ), w AS MATERIALIZED (
            -- float8 throughout: numeric arithmetic here ran once per posting and cost a quarter
            -- of the query. greatest(): N is cached briefly and may trail a fresh document frequency.
            SELECT q.lexeme, ln(1 + (greatest({sql.bind(float(corpus_size))}::float8, df.n) - df.n + 0.5)
                                / (df.n + 0.5)) AS idf
            FROM q CROSS JOIN LATERAL (
                SELECT count(*)::float8 AS n FROM keyword_posting d
                WHERE d.tenant_id = ANY({tenants}::uuid[]) AND d.lexeme = q.lexeme
            ) df
            WHERE df.n > 0
        ), scored AS MATERIALIZED (
            SELECT p.tenant_id, p.memory_id,
                   sum(w.idf * p.term_frequency / (p.term_frequency + {length_free}::float8
                       + {per_length}::float8 * p.document_length)) AS score
            FROM w JOIN keyword_posting p ON p.tenant_id = ANY({tenants}::uuid[]) AND p.lexeme = w.lexeme
            GROUP BY p.tenant_id, p.memory_id
            ORDER BY score DESC, p.memory_id
            LIMIT {sql.bind(candidates)}::int
        )
        SELECT m.id, s.score * {sql.bind(k1 + 1)}::float8 AS score, m.created_at, m.path,
               (SELECT count(*) FROM scored) AS candidates
        FROM scored s JOIN memory m ON m.tenant_id = s.tenant_id AND m.id = s.memory_id
        WHERE {where}
        ORDER BY s.score DESC, {TIE_BREAK_SQL}
        LIMIT {sql.bind(limit)}
        """,
        *sql.params,
    )
    truncated = candidates is not None and bool(rows) and int(rows[0]["candidates"]) >= candidates
    if candidates is not None and not rows:
        # No row survived the filters: only a count can tell whether the cut hid some.
        truncated = True
    return KeywordRows(_leg_rows(rows), truncated)


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
        f"ORDER BY score DESC, {TIE_BREAK_SQL} LIMIT {sql.bind(limit)}",
        *sql.params,
    )
    return _leg_rows(rows)
