"""What every retrieval leg shares: the candidate filter, the WHERE clause it becomes, and parameters.

The WHERE clause is assembled from fixed fragments; every user value travels as a $n parameter.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

from app.retrieval.hits import Hit


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
    # Semantic leg only: the scripts the embedder reads (None: any); rows in others are left out.
    embedder_scripts: Sequence[str] | None = None
    # What was valid at this time, superseded facts included (None: what is valid now).
    as_of: datetime | None = None


@dataclass(slots=True)
class Sql:
    """A statement's parameters, bound in order as $1, $2, …"""

    params: list[Any] = field(default_factory=list)

    def bind(self, value: Any) -> str:
        """Add a parameter; returns its placeholder."""
        self.params.append(value)
        return f"${len(self.params)}"


def valid_clauses(sql: Sql, as_of: datetime | None) -> list[str]:
    """Valid time over alias m: what is true now, or what was true at as_of (R-M8).

    A fact or rule is valid from valid_from (NULL: its created_at) until valid_to. One superseded
    before valid time was recorded, whose successor is gone, has no known end: left out of as_of.
    Retracted ones were never true. Other kinds are valid from their created_at, without end.
    """
    if as_of is None:
        return ["(m.validity IS NULL OR m.validity = 'active')", "(m.valid_to IS NULL OR m.valid_to > now())"]
    at = sql.bind(as_of)
    return [
        f"coalesce(m.valid_from, m.created_at) <= {at}",
        f"(m.valid_to > {at} OR (m.valid_to IS NULL AND (m.validity IS NULL OR m.validity = 'active')))",
        "(m.validity IS NULL OR m.validity <> 'retracted')",
    ]


def where_clause(sql: Sql, f: CandidateFilter) -> str:
    """The shared WHERE clause over alias m (tenant first: it is what RLS also enforces)."""
    clauses = [
        f"m.tenant_id = ANY({sql.bind([uuid.UUID(t) for t in f.tenant_ids])}::uuid[])",
        f"m.kind = ANY({sql.bind(list(f.kinds))}::text[])",
        "(m.kind <> 'episode' OR m.expires_at > now())",
        *valid_clauses(sql, f.as_of),
    ]
    if f.min_confidence > 0:
        # confidence · exp(−rate · days) ≥ min, taken as logarithms: rate · days ≤ ln(confidence)
        # − ln(min). PostgreSQL raises on a float result that under- or overflows, and one row
        # whose term did that broke every search: exp() of a fact that faded long ago underflows,
        # so does confidence / min for a tiny confidence, and a tiny min overflows it. Logarithms
        # of positive numbers never do; the product cannot either, since the schema keeps a rate
        # at 0 or in [1e-6, 10] (0018) and the age in days is 0 or past 1e-11 (a microsecond).
        # ln() only ever sees a positive confidence: CASE, unlike AND, fixes the order.
        clauses.append(
            "(m.confidence IS NULL OR CASE WHEN m.confidence > 0 THEN m.decay_rate * "
            "(extract(epoch FROM now() - m.last_confirmed_at) / 86400.0) "
            f"<= ln(m.confidence) - {sql.bind(math.log(f.min_confidence))}::float8 ELSE false END)"
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


def hits_of(rows: Sequence[asyncpg.Record]) -> list[Hit]:
    """A leg's rows (id, score, created_at, path, content_key) as hits, in their order."""
    return [Hit(r["id"], float(r["score"]), r["created_at"], r["path"], r["content_key"]) for r in rows]


def semantic_extras(sql: Sql, f: CandidateFilter, q: str, min_similarity: float | None, column: str) -> str:
    """The semantic leg's own conditions: a similarity floor, and rows the embedder can read."""
    extra = ""
    if min_similarity is not None:
        extra += f" AND {column} <=> {q} <= 1 - {sql.bind(min_similarity)}"
    if f.embedder_scripts is not None:
        # A vector of text the model cannot read is noise: those rows are the keyword leg's alone.
        extra += f" AND (m.script IS NULL OR m.script = ANY({sql.bind(list(f.embedder_scripts))}::text[]))"
    return extra
