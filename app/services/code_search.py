"""Symbol search and multi-hop expansion over the code index, on top of the fused results."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import asyncpg

from app.ingest.code_model import STRUCTURAL_RELATIONS
from app.repositories import code as code_repo
from app.repositories.search import CandidateFilter
from app.retrieval.fusion import FusedHit
from app.retrieval.globs import path_matches
from app.retrieval.scoring import tie_break_key

TYPE_KINDS = frozenset({"class", "struct", "enum", "protocol", "interface", "type", "extension"})
HOP_DECAY = 0.5  # each hop passes on half of the score that reached its source
SYMBOL_SCORE = 1.0
MEMBER_SCORE = 0.9
UNKNOWN_TIME = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(slots=True)
class Candidate:
    """A result on its way to the response."""

    id: str
    score: float
    created_at: datetime
    match_type: str
    decay: float = 1.0
    hit: FusedHit | None = None
    hop_depth: int | None = None
    paths: list[str] = field(default_factory=list)


def combine(first: float, second: float) -> float:
    """Two independent signals for one chunk: 1 − (1 − a)(1 − b), which stays in [0, 1]."""
    return 1.0 - (1.0 - first) * (1.0 - second)


def _allowed(loc: code_repo.CodeLocation, f: CandidateFilter) -> bool:
    if f.path_regex is not None and not path_matches(f.path_regex, loc.path):
        return False
    return not (f.exclude_path_regex is not None and path_matches(f.exclude_path_regex, loc.path))


async def expand(
    conn: asyncpg.Connection,
    tenant_id: str,
    f: CandidateFilter,
    candidates: Sequence[Candidate],
    *,
    symbol: str | None,
    depth: int,
    seeds: int,
) -> list[Candidate]:
    """Add exact symbol matches (first) and chunks reached by following references."""
    by_id = {c.id: c for c in candidates}
    if symbol:
        await _add_symbol_hits(conn, tenant_id, f, by_id, symbol)
    if depth > 0:
        ordered = sorted(by_id.values(), key=lambda c: tie_break_key(c.score, c.created_at, c.id))[:seeds]
        frontier = {c.id: c for c in ordered}
        for hop in range(1, depth + 1):
            frontier = await _hop(conn, tenant_id, f, by_id, frontier, hop)
            if not frontier:
                break
    return list(by_id.values())


async def _add_symbol_hits(
    conn: asyncpg.Connection, tenant_id: str, f: CandidateFilter, by_id: dict[str, Candidate], symbol: str
) -> None:
    definitions = [
        d
        for d in await code_repo.definitions(
            conn, tenant_id=tenant_id, repository=f.repository, names=[symbol]
        )
        if _allowed(d, f)
    ]
    for loc in definitions:
        _upsert(by_id, str(loc.chunk_id), SYMBOL_SCORE, "symbol")
    if any(d.symbol_kind in TYPE_KINDS for d in definitions):
        members = await code_repo.members_and_extensions(
            conn, tenant_id=tenant_id, repository=f.repository, type_name=symbol
        )
        for loc in members:
            if _allowed(loc, f):
                _upsert(by_id, str(loc.chunk_id), MEMBER_SCORE, "symbol")


def _upsert(by_id: dict[str, Candidate], chunk_id: str, score: float, match_type: str) -> None:
    existing = by_id.get(chunk_id)
    if existing is None:
        by_id[chunk_id] = Candidate(id=chunk_id, score=score, created_at=UNKNOWN_TIME, match_type=match_type)
    elif score >= existing.score:
        existing.score = score
        existing.match_type = match_type


async def _hop(
    conn: asyncpg.Connection,
    tenant_id: str,
    f: CandidateFilter,
    by_id: dict[str, Candidate],
    frontier: dict[str, Candidate],
    hop: int,
) -> dict[str, Candidate]:
    references = await code_repo.references_from(
        conn, tenant_id=tenant_id, chunk_ids=[uuid.UUID(i) for i in frontier], relations=STRUCTURAL_RELATIONS
    )
    if not references:
        return {}
    targets: dict[str, list[code_repo.CodeLocation]] = {}
    for ref in references:
        if ref.target:
            targets.setdefault(ref.target, []).append(ref)
    definitions = await code_repo.definitions(
        conn, tenant_id=tenant_id, repository=f.repository, names=sorted(targets)
    )
    # Scores as they were when the hop started: a source reached again within this hop must not
    # pass on its freshly raised score (the result would depend on iteration order).
    source_scores = {chunk_id: c.score for chunk_id, c in frontier.items()}
    reached: dict[str, Candidate] = {}
    for loc in definitions:
        if not _allowed(loc, f):
            continue
        target_id = str(loc.chunk_id)
        for ref in targets.get(loc.symbol or "", []):
            source_score = source_scores.get(str(ref.chunk_id))
            if source_score is None or str(ref.chunk_id) == target_id:
                continue
            signal = source_score * HOP_DECAY
            path = f"{ref.symbol or ref.path} -{ref.relation}-> {loc.symbol}"
            existing = by_id.get(target_id)
            if existing is None:
                existing = Candidate(
                    id=target_id, score=signal, created_at=UNKNOWN_TIME, match_type="multi-hop", hop_depth=hop
                )
                by_id[target_id] = existing
            else:
                existing.score = combine(existing.score, signal)
                if existing.match_type == "multi-hop" and existing.hop_depth is not None:
                    existing.hop_depth = min(existing.hop_depth, hop)
            if path not in existing.paths:
                existing.paths.append(path)
            reached[target_id] = existing
    return reached
