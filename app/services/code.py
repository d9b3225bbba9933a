"""Code index: ingest files into chunks, symbols and edges; list and delete indexed files."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

import asyncpg

from app.auth import Principal
from app.embeddings.base import Embedder
from app.errors import not_found
from app.hashing import content_hash
from app.infra.config import Quota
from app.infra.db import Database
from app.ingest.code_model import CodeChunk, split_identifier
from app.ingest.code_parser import parse_code
from app.ingest.paths import detect_language, path_terms, validate_relative_path
from app.repositories import chunks as chunk_repo
from app.repositories import code as code_repo
from app.repositories import memories as memory_repo
from app.retrieval.language import dominant_script
from app.retrieval.query import search_text_for
from app.services.quotas import ensure_within_quota


@dataclass(slots=True)
class IngestStats:
    """What a code upload did."""

    files: int = 0
    skipped: int = 0
    chunks: int = 0
    embedded: int = 0
    symbols: int = 0
    edges: int = 0
    unsupported: list[str] = field(default_factory=list)


def chunk_search_terms(path: str, chunk: CodeChunk) -> list[str]:
    """Identifier parts the keyword index should also see: authenticateUser -> authenticate user."""
    names = [*chunk.declared, *(r.name for r in chunk.references)]
    if chunk.symbol:
        names.append(chunk.symbol)
    if chunk.parent_symbol:
        names.append(chunk.parent_symbol)
    terms: list[str] = []
    for name in names:
        terms.extend(split_identifier(name))
    terms.extend(path_terms(path))
    return list(dict.fromkeys(terms))


@dataclass(frozen=True, slots=True)
class _PreparedFile:
    """One changed file, parsed and embedded, ready to replace its stored version."""

    path: str
    file_hash: str
    language: str
    rows: list[memory_repo.NewMemory]
    symbols: list[code_repo.SymbolRow]
    edges: list[code_repo.EdgeRow]


async def _prepare_file(
    embedder: Embedder | None, *, repository: str, path: str, content: str, language: str, now: datetime
) -> _PreparedFile:
    """Parse and embed one file: the slow part of an upload, done before any transaction opens."""
    # Parsing (tree-sitter or ast) a 1 MiB file is CPU work: in a thread, off the event loop.
    chunks = await asyncio.to_thread(parse_code, path, content)
    rows = [
        memory_repo.NewMemory(
            id=uuid.uuid4(),
            kind="code",
            content=chunk.content,
            search_text=search_text_for(chunk.content, chunk_search_terms(path, chunk)),
            script=dominant_script(chunk.content),
            created_at=now,
            path=path,
            start_line=chunk.start_line,
            end_line=chunk.end_line,
            content_hash=content_hash(chunk.content),
            repository=repository,
            symbol=chunk.symbol,
            symbol_kind=chunk.symbol_kind,
            language=language,
            parent_symbol=chunk.parent_symbol,
        )
        for chunk in chunks
    ]
    if embedder is not None and rows:
        texts = [_embedding_text(path, c) for c in chunks]
        vectors = await embedder.embed_documents(texts)
        nexts = await embedder.switch_vectors(texts)
        for row, vector, next_vector in zip(rows, vectors, nexts, strict=True):
            row.embedding, row.embedding_next = vector, next_vector
    symbols = [
        code_repo.SymbolRow(
            row.id, name, chunk.symbol_kind, chunk.parent_symbol, chunk.start_line, chunk.end_line
        )
        for row, chunk in zip(rows, chunks, strict=True)
        for name in dict.fromkeys(chunk.declared)
    ]
    edges = [
        code_repo.EdgeRow(row.id, chunk.symbol, ref.name, ref.kind, ref.line)
        for row, chunk in zip(rows, chunks, strict=True)
        for ref in chunk.references
    ]
    return _PreparedFile(path, content_hash(content), language, rows, symbols, edges)


async def ingest_files(
    db: Database,
    embedder: Embedder | None,
    principal: Principal,
    *,
    repository: str,
    files: list[tuple[str, str]],
    quota: Quota | None = None,
) -> IngestStats:
    """Index files of a repository, all or nothing; files whose content hash is unchanged are skipped.

    Every file is parsed and embedded first, then all of them replace their stored versions in
    one transaction, which checks the quota once at its end: an upload that fails anywhere (the
    quota, the embedder, the database) leaves the repository as it was, never a part of itself.
    """
    tenant_id = principal.tenant_id
    stats = IngestStats()
    for path, _ in files:
        validate_relative_path(path)
    async with db.transaction([tenant_id], readonly=True) as conn:
        known = await code_repo.list_files(conn, tenant_id=tenant_id, repository=repository)
    now = datetime.now(UTC)
    prepared: list[_PreparedFile] = []
    for path, content in files:
        language = detect_language(path)
        if language is None:
            stats.unsupported.append(path)
            continue
        if known.get(path) == content_hash(content):
            stats.skipped += 1
            continue
        prepared.append(
            await _prepare_file(
                embedder, repository=repository, path=path, content=content, language=language, now=now
            )
        )

    async def work(conn: asyncpg.Connection) -> None:
        # Path locks in one order, so two uploads sharing files cannot deadlock on them.
        for path in sorted({f.path for f in prepared}):
            await chunk_repo.lock_path(conn, tenant_id=tenant_id, path=f"{repository}:{path}")
        for f in prepared:
            await code_repo.delete_file(conn, tenant_id=tenant_id, repository=repository, path=f.path)
            await memory_repo.insert_memories(conn, tenant_id=tenant_id, rows=f.rows)
            await code_repo.insert_symbols(
                conn, tenant_id=tenant_id, repository=repository, path=f.path, symbols=f.symbols
            )
            await code_repo.insert_edges(
                conn, tenant_id=tenant_id, repository=repository, path=f.path, edges=f.edges
            )
            await code_repo.upsert_file(
                conn,
                tenant_id=tenant_id,
                repository=repository,
                path=f.path,
                content_hash=f.file_hash,
                language=f.language,
            )
        if any(f.rows for f in prepared):
            await ensure_within_quota(conn, tenant_id=tenant_id, quota=quota)

    if prepared:
        await db.run([tenant_id], work)
    for f in prepared:
        stats.files += 1
        stats.chunks += len(f.rows)
        stats.embedded += len(f.rows) if embedder is not None else 0
        stats.symbols += len(f.symbols)
        stats.edges += len(f.edges)
    return stats


def _embedding_text(path: str, chunk: CodeChunk) -> str:
    return code_embedding_text(path, chunk.symbol_kind, chunk.parent_symbol, chunk.symbol, chunk.content)


def code_embedding_text(
    path: str, symbol_kind: str | None, parent_symbol: str | None, symbol: str | None, content: str
) -> str:
    """The text a code chunk is embedded as (also when an import re-embeds a stored chunk)."""
    # The path and symbol give MiniLM the context a bare function body lacks.
    header = f"{path} {symbol_kind} {parent_symbol + '.' if parent_symbol else ''}{symbol or ''}"
    return f"{header}\n{content}"


async def list_files(db: Database, principal: Principal, *, repository: str) -> dict[str, str]:
    """path -> content hash of a repository's indexed files."""
    async with db.transaction([principal.tenant_id], readonly=True) as conn:
        return await code_repo.list_files(conn, tenant_id=principal.tenant_id, repository=repository)


async def delete_file(db: Database, principal: Principal, *, repository: str, path: str) -> None:
    """Forget one indexed file."""
    tenant_id = principal.tenant_id

    async def work(conn: asyncpg.Connection) -> None:
        # The indexer's lock: a delete racing a re-index of the file must not orphan its chunks.
        await chunk_repo.lock_path(conn, tenant_id=tenant_id, path=f"{repository}:{path}")
        if not await code_repo.delete_file(conn, tenant_id=tenant_id, repository=repository, path=path):
            raise not_found("file")

    await db.run([tenant_id], work)
