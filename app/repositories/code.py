"""SQL for the code index: files, symbols and reference edges."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg


@dataclass(frozen=True, slots=True)
class SymbolRow:
    """A declared symbol to store."""

    chunk_id: uuid.UUID
    name: str
    symbol_kind: str
    parent_symbol: str | None
    start_line: int
    end_line: int


@dataclass(frozen=True, slots=True)
class EdgeRow:
    """A reference from a chunk to a name."""

    chunk_id: uuid.UUID
    source_symbol: str | None
    target_name: str
    relation: str
    line: int


@dataclass(frozen=True, slots=True)
class CodeLocation:
    """Where a symbol or reference lives."""

    chunk_id: uuid.UUID
    path: str
    symbol: str | None
    symbol_kind: str | None
    parent_symbol: str | None
    start_line: int
    end_line: int
    relation: str | None = None
    target: str | None = None
    line: int | None = None


async def list_files(conn: asyncpg.Connection, *, tenant_id: str, repository: str) -> dict[str, str]:
    """path -> content hash of every indexed file of a repository."""
    rows = await conn.fetch(
        "SELECT path, content_hash FROM code_file WHERE tenant_id = $1 AND repository = $2",
        uuid.UUID(tenant_id),
        repository,
    )
    return {r["path"]: r["content_hash"] for r in rows}


async def upsert_file(
    conn: asyncpg.Connection,
    *,
    tenant_id: str,
    repository: str,
    path: str,
    content_hash: str,
    language: str | None,
) -> None:
    """Record a file as indexed at this content hash."""
    await conn.execute(
        "INSERT INTO code_file (tenant_id, repository, path, content_hash, language) VALUES ($1, $2, $3, $4, $5) "
        "ON CONFLICT (tenant_id, repository, path) DO UPDATE SET content_hash = EXCLUDED.content_hash, "
        "language = EXCLUDED.language, updated_at = clock_timestamp()",
        uuid.UUID(tenant_id),
        repository,
        path,
        content_hash,
        language,
    )


async def forget_content_hash(
    conn: asyncpg.Connection, *, tenant_id: str, repository: str, path: str
) -> None:
    """Make the next index of this file re-parse it, whatever its content (a chunk was deleted)."""
    await conn.execute(
        "UPDATE code_file SET content_hash = '' WHERE tenant_id = $1 AND repository = $2 AND path = $3",
        uuid.UUID(tenant_id),
        repository,
        path,
    )


async def delete_file_index(conn: asyncpg.Connection, *, tenant_id: str, repository: str, path: str) -> None:
    """Drop a file's symbols and edges (its chunks are handled with the memory rows)."""
    tid = uuid.UUID(tenant_id)
    await conn.execute(
        "DELETE FROM code_symbol WHERE tenant_id = $1 AND repository = $2 AND path = $3",
        tid,
        repository,
        path,
    )
    await conn.execute(
        "DELETE FROM code_edge WHERE tenant_id = $1 AND repository = $2 AND path = $3", tid, repository, path
    )


async def delete_file(conn: asyncpg.Connection, *, tenant_id: str, repository: str, path: str) -> bool:
    """Forget a file entirely: row, chunks, symbols, edges. False when it was not indexed."""
    tid = uuid.UUID(tenant_id)
    await delete_file_index(conn, tenant_id=tenant_id, repository=repository, path=path)
    await conn.execute(
        "DELETE FROM memory WHERE tenant_id = $1 AND kind = 'code' AND repository = $2 AND path = $3",
        tid,
        repository,
        path,
    )
    result: str = await conn.execute(
        "DELETE FROM code_file WHERE tenant_id = $1 AND repository = $2 AND path = $3", tid, repository, path
    )
    return result.endswith(" 1")


async def insert_symbols(
    conn: asyncpg.Connection, *, tenant_id: str, repository: str, path: str, symbols: Sequence[SymbolRow]
) -> None:
    """Store declared symbols."""
    if symbols:
        tid = uuid.UUID(tenant_id)
        await conn.executemany(
            "INSERT INTO code_symbol (tenant_id, id, repository, path, chunk_id, name, symbol_kind, parent_symbol, "
            "start_line, end_line) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            [
                (
                    tid,
                    uuid.uuid4(),
                    repository,
                    path,
                    s.chunk_id,
                    s.name,
                    s.symbol_kind,
                    s.parent_symbol,
                    s.start_line,
                    s.end_line,
                )
                for s in symbols
            ],
        )


async def insert_edges(
    conn: asyncpg.Connection, *, tenant_id: str, repository: str, path: str, edges: Sequence[EdgeRow]
) -> None:
    """Store reference edges."""
    if edges:
        tid = uuid.UUID(tenant_id)
        await conn.executemany(
            "INSERT INTO code_edge (tenant_id, id, repository, path, chunk_id, source_symbol, target_name, relation, line) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            [
                (
                    tid,
                    uuid.uuid4(),
                    repository,
                    path,
                    e.chunk_id,
                    e.source_symbol,
                    e.target_name,
                    e.relation,
                    e.line,
                )
                for e in edges
            ],
        )


def _locations(rows: Sequence[asyncpg.Record]) -> list[CodeLocation]:
    return [
        CodeLocation(
            chunk_id=r["chunk_id"],
            path=r["path"],
            symbol=r["symbol"],
            symbol_kind=r["symbol_kind"],
            parent_symbol=r["parent_symbol"],
            start_line=r["start_line"],
            end_line=r["end_line"],
            relation=r.get("relation"),
            target=r.get("target_name"),
            line=r.get("line"),
        )
        for r in rows
    ]


async def definitions(
    conn: asyncpg.Connection, *, tenant_id: str, repository: str | None, names: Sequence[str]
) -> list[CodeLocation]:
    """Chunks that declare any of names."""
    rows = await conn.fetch(
        "SELECT DISTINCT s.chunk_id, s.path, s.name AS symbol, s.symbol_kind, s.parent_symbol, m.start_line, m.end_line "
        "FROM code_symbol s JOIN memory m ON m.tenant_id = s.tenant_id AND m.id = s.chunk_id "
        "WHERE s.tenant_id = $1 AND ($2::text IS NULL OR s.repository = $2) AND s.name = ANY($3::text[]) "
        "ORDER BY s.path, m.start_line",
        uuid.UUID(tenant_id),
        repository,
        list(names),
    )
    return _locations(rows)


async def members_and_extensions(
    conn: asyncpg.Connection, *, tenant_id: str, repository: str | None, type_name: str
) -> list[CodeLocation]:
    """Methods whose parent is type_name, and extensions of it."""
    rows = await conn.fetch(
        "SELECT m.id AS chunk_id, m.path, m.symbol, m.symbol_kind, m.parent_symbol, m.start_line, m.end_line "
        "FROM memory m WHERE m.tenant_id = $1 AND m.kind = 'code' AND ($2::text IS NULL OR m.repository = $2) "
        "AND (m.parent_symbol = $3 OR (m.symbol = $3 AND m.symbol_kind = 'extension')) "
        "ORDER BY m.path, m.start_line",
        uuid.UUID(tenant_id),
        repository,
        type_name,
    )
    return _locations(rows)


async def references_to(
    conn: asyncpg.Connection,
    *,
    tenant_id: str,
    repository: str | None,
    names: Sequence[str],
    relations: Sequence[str],
) -> list[CodeLocation]:
    """Chunks that reference any of names with one of the relations (callers, implementers, importers)."""
    rows = await conn.fetch(
        "SELECT e.chunk_id, e.path, m.symbol, m.symbol_kind, m.parent_symbol, m.start_line, m.end_line, "
        "e.relation, e.target_name, e.line "
        "FROM code_edge e JOIN memory m ON m.tenant_id = e.tenant_id AND m.id = e.chunk_id "
        "WHERE e.tenant_id = $1 AND ($2::text IS NULL OR e.repository = $2) "
        "AND e.target_name = ANY($3::text[]) AND e.relation = ANY($4::text[]) "
        "ORDER BY e.path, e.line",
        uuid.UUID(tenant_id),
        repository,
        list(names),
        list(relations),
    )
    return _locations(rows)


async def references_from(
    conn: asyncpg.Connection, *, tenant_id: str, chunk_ids: Sequence[uuid.UUID], relations: Sequence[str]
) -> list[CodeLocation]:
    """What the given chunks reference (callees, supertypes, imports)."""
    rows = await conn.fetch(
        "SELECT e.chunk_id, e.path, m.symbol, m.symbol_kind, m.parent_symbol, m.start_line, m.end_line, "
        "e.relation, e.target_name, e.line "
        "FROM code_edge e JOIN memory m ON m.tenant_id = e.tenant_id AND m.id = e.chunk_id "
        "WHERE e.tenant_id = $1 AND e.chunk_id = ANY($2::uuid[]) AND e.relation = ANY($3::text[]) "
        "ORDER BY e.path, e.line, e.target_name",
        uuid.UUID(tenant_id),
        list(chunk_ids),
        list(relations),
    )
    return _locations(rows)


async def imports_under(
    conn: asyncpg.Connection, *, tenant_id: str, repository: str | None, prefix: str | None
) -> list[tuple[str, str]]:
    """(path, imported name) of every import edge, optionally under a directory prefix."""
    rows = await conn.fetch(
        "SELECT DISTINCT path, target_name FROM code_edge WHERE tenant_id = $1 AND relation = 'imports' "
        "AND ($2::text IS NULL OR repository = $2) AND ($3::text IS NULL OR path LIKE $3 || '%') "
        "ORDER BY path, target_name",
        uuid.UUID(tenant_id),
        repository,
        prefix,
    )
    return [(r["path"], r["target_name"]) for r in rows]


async def all_paths(conn: asyncpg.Connection, *, tenant_id: str, repository: str | None) -> list[str]:
    """Every indexed path (for module dependency mapping)."""
    rows = await conn.fetch(
        "SELECT path FROM code_file WHERE tenant_id = $1 AND ($2::text IS NULL OR repository = $2) ORDER BY path",
        uuid.UUID(tenant_id),
        repository,
    )
    return [r["path"] for r in rows]
