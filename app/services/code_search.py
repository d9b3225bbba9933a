"""Symbol search and multi-hop expansion over the code index, on top of the fused results."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import asyncpg

from app.ingest.code_model import STRUCTURAL_RELATIONS
from app.repositories import code as code_repo
from app.repositories.search import CandidateFilter
from app.retrieval.globs import path_matches
from app.retrieval.hits import Hit
from app.retrieval.scoring import tie_break_key

TYPE_KINDS = frozenset({"class", "struct", "enum", "protocol", "interface", "type", "extension"})
HOP_DECAY = 0.5  # each hop passes on half of the score that reached its source
SYMBOL_SCORE = 1.0
MEMBER_SCORE = 0.9
UNKNOWN_TIME = datetime(1970, 1, 1, tzinfo=UTC)


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
    candidates: Sequence[Hit],
    *,
    symbol: str | None,
    depth: int,
    seeds: int,
) -> list[Hit]:
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
    conn: asyncpg.Connection, tenant_id: str, f: CandidateFilter, by_id: dict[uuid.UUID, Hit], symbol: str
) -> None:
    definitions = [
        d
        for d in await code_repo.definitions(
            conn, tenant_id=tenant_id, repository=f.repository, names=[symbol]
        )
        if _allowed(d, f)
    ]
    for loc in definitions:
        _upsert(by_id, loc.chunk_id, SYMBOL_SCORE, "symbol")
    if any(d.symbol_kind in TYPE_KINDS for d in definitions):
        members = await code_repo.members_and_extensions(
            conn, tenant_id=tenant_id, repository=f.repository, type_name=symbol
        )
        for loc in members:
            if _allowed(loc, f):
                _upsert(by_id, loc.chunk_id, MEMBER_SCORE, "symbol")


def _found(chunk_id: uuid.UUID, score: float, match_type: str) -> Hit:
    """A chunk that no leg returned, found by the code index."""
    hit = Hit(chunk_id, score, UNKNOWN_TIME, None)
    hit.match_type = match_type
    return hit


def _upsert(by_id: dict[uuid.UUID, Hit], chunk_id: uuid.UUID, score: float, match_type: str) -> None:
    existing = by_id.get(chunk_id)
    if existing is None:
        by_id[chunk_id] = _found(chunk_id, score, match_type)
    elif score >= existing.score:
        existing.score = score
        existing.match_type = match_type


async def _hop(
    conn: asyncpg.Connection,
    tenant_id: str,
    f: CandidateFilter,
    by_id: dict[uuid.UUID, Hit],
    frontier: dict[uuid.UUID, Hit],
    hop: int,
) -> dict[uuid.UUID, Hit]:
    references = await code_repo.references_from(
        conn, tenant_id=tenant_id, chunk_ids=list(frontier), relations=STRUCTURAL_RELATIONS
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
    reached: dict[uuid.UUID, Hit] = {}
    for loc in definitions:
        if not _allowed(loc, f):
            continue
        target_id = loc.chunk_id
        for ref in targets.get(loc.symbol or "", []):
            source_score = source_scores.get(ref.chunk_id)
            if source_score is None or ref.chunk_id == target_id:
                continue
            signal = source_score * HOP_DECAY
            path = f"{ref.symbol or ref.path} -{ref.relation}-> {loc.symbol}"
            existing = by_id.get(target_id)
            if existing is None:
                existing = _found(target_id, signal, "multi-hop")
                existing.hop_depth = hop
                by_id[target_id] = existing
            else:
                existing.score = combine(existing.score, signal)
                if existing.match_type == "multi-hop" and existing.hop_depth is not None:
                    existing.hop_depth = min(existing.hop_depth, hop)
            if path not in existing.paths:
                existing.paths = (*existing.paths, path)
            reached[target_id] = existing
    return reached
