"""Code index: ingest files into chunks, symbols and edges; list and delete indexed files."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

import asyncpg

from app.auth import Principal
from app.db import Database
from app.embeddings.base import Embedder
from app.errors import not_found
from app.hashing import content_hash
from app.ingest.code_model import CodeChunk, split_identifier
from app.ingest.code_parser import parse_code
from app.ingest.paths import detect_language, path_terms, validate_relative_path
from app.repositories import chunks as chunk_repo
from app.repositories import code as code_repo
from app.repositories import memories as memory_repo
from app.retrieval.language import dominant_script
from app.retrieval.query import search_text_for
from app.services.quotas import Quota, ensure_within_quota


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


async def ingest_files(
    db: Database,
    embedder: Embedder | None,
    principal: Principal,
    *,
    repository: str,
    files: list[tuple[str, str]],
    quota: Quota | None = None,
) -> IngestStats:
    """Index files of a repository; files whose content hash is unchanged are skipped."""
    tenant_id = principal.tenant_id
    stats = IngestStats()
    for path, _ in files:
        validate_relative_path(path)
    async with db.transaction([tenant_id], readonly=True) as conn:
        known = await code_repo.list_files(conn, tenant_id=tenant_id, repository=repository)
    now = datetime.now(UTC)
    for path, content in files:
        language = detect_language(path)
        if language is None:
            stats.unsupported.append(path)
            continue
        file_hash = content_hash(content)
        if known.get(path) == file_hash:
            stats.skipped += 1
            continue
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
            vectors = await embedder.embed_documents([_embedding_text(path, c) for c in chunks])
            for row, vector in zip(rows, vectors, strict=True):
                row.embedding = vector
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
        async with db.transaction([tenant_id]) as conn:
            await chunk_repo.lock_path(conn, tenant_id=tenant_id, path=f"{repository}:{path}")
            await code_repo.delete_file(conn, tenant_id=tenant_id, repository=repository, path=path)
            await memory_repo.insert_memories(conn, tenant_id=tenant_id, rows=rows)
            if rows:
                await ensure_within_quota(conn, tenant_id=tenant_id, quota=quota)
            await code_repo.insert_symbols(
                conn, tenant_id=tenant_id, repository=repository, path=path, symbols=symbols
            )
            await code_repo.insert_edges(
                conn, tenant_id=tenant_id, repository=repository, path=path, edges=edges
            )
            await code_repo.upsert_file(
                conn,
                tenant_id=tenant_id,
                repository=repository,
                path=path,
                content_hash=file_hash,
                language=language,
            )
        stats.files += 1
        stats.chunks += len(rows)
        stats.embedded += len(rows) if embedder is not None else 0
        stats.symbols += len(symbols)
        stats.edges += len(edges)
    return stats


def _embedding_text(path: str, chunk: CodeChunk) -> str:
    # The path and symbol give MiniLM the context a bare function body lacks.
    header = f"{path} {chunk.symbol_kind} {chunk.parent_symbol + '.' if chunk.parent_symbol else ''}{chunk.symbol or ''}"
    return f"{header}\n{chunk.content}"


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
