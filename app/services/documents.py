"""Markdown memory files: chunk, re-embed only what changed, replace atomically, serve slices."""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from app.auth import Principal
from app.embeddings.base import Embedder, SwitchVector, Vector
from app.errors import ApiError, not_found
from app.hashing import content_hash
from app.infra.config import Quota
from app.infra.db import Database
from app.ingest.markdown import TextChunk, chunk_markdown
from app.ingest.paths import DOCUMENT_SUFFIXES, is_document, path_terms, validate_relative_path
from app.repositories import chunks as chunk_repo
from app.repositories import documents as doc_repo
from app.repositories import memories as memory_repo
from app.retrieval.language import dominant_script
from app.retrieval.query import search_text_for
from app.services.quotas import ensure_within_quota


@dataclass(frozen=True, slots=True)
class UploadResult:
    """What a document upload did."""

    path: str
    chunks: int
    embedded: int
    unchanged: bool


def validate_document_path(path: str) -> str:
    """A clean relative POSIX path of a markdown/text file, or a 422."""
    validate_relative_path(path)
    if not is_document(path):
        raise ApiError(
            422, "validation_error", f"path must be a markdown or text file ({', '.join(DOCUMENT_SUFFIXES)})"
        )
    return path


@dataclass(frozen=True, slots=True)
class _ChunkPlan:
    """How the stored chunks of a file become the new ones."""

    moves: list[tuple[uuid.UUID, int, int]]
    fresh: list[TextChunk]
    removed: list[uuid.UUID]


def _plan_chunks(
    chunks: list[TextChunk], existing: list[chunk_repo.StoredChunk], *, rescope: bool
) -> _ChunkPlan:
    """Reuse every stored chunk whose text is unchanged (unless the file changes scope)."""
    by_hash: dict[str, list[chunk_repo.StoredChunk]] = defaultdict(list)
    for old_chunk in existing:
        by_hash[old_chunk.content_hash].append(old_chunk)
    kept: list[chunk_repo.StoredChunk] = []
    moves: list[tuple[uuid.UUID, int, int]] = []
    fresh: list[TextChunk] = []
    for chunk in chunks:
        reusable = by_hash.get(chunk.content_hash)
        if reusable and not rescope:
            old = reusable.pop(0)
            kept.append(old)
            if (old.start_line, old.end_line) != (chunk.start_line, chunk.end_line):
                moves.append((old.id, chunk.start_line, chunk.end_line))
        else:
            fresh.append(chunk)
    kept_ids = {c.id for c in kept}
    return _ChunkPlan(moves, fresh, [c.id for c in existing if c.id not in kept_ids])


async def _embed_by_hash(
    embedder: Embedder | None, chunks: list[TextChunk]
) -> dict[str, tuple[Vector, SwitchVector | None]]:
    """Vectors of the chunks' texts (and a running model switch's), keyed by content hash (equal texts are embedded once)."""
    if embedder is None or not chunks:
        return {}
    texts = {chunk.content_hash: chunk.content for chunk in chunks}
    vectors = await embedder.embed_documents(list(texts.values()))
    nexts = await embedder.switch_vectors(list(texts.values()))
    return dict(zip(texts, zip(vectors, nexts, strict=True), strict=True))


async def upload_document(
    db: Database,
    embedder: Embedder | None,
    principal: Principal,
    *,
    path: str,
    content: str,
    scope: str,
    quota: Quota | None = None,
) -> UploadResult:
    """Store a file; chunks whose text is unchanged keep their row and embedding."""
    path = validate_document_path(path)
    tenant_id = principal.tenant_id
    file_hash = content_hash(content)
    # Chunking a 4 MiB file takes a while: in a thread, so other tenants' requests go on.
    chunks = await asyncio.to_thread(chunk_markdown, content)
    # Embedding a big file takes seconds: it happens with no connection held, against a snapshot
    # of the stored chunks, so a tenant's uploads cannot drain the pool everyone shares.
    async with db.transaction([tenant_id], readonly=True) as conn:
        stored = await doc_repo.get_document(conn, tenant_id=tenant_id, path=path)
        existing = await chunk_repo.chunks_of_path(conn, tenant_id=tenant_id, kind="document", path=path)
    if _unchanged(stored, file_hash, scope):
        return UploadResult(path=path, chunks=len(chunks), embedded=0, unchanged=True)
    rescope = stored is not None and stored.scope != scope
    vectors = await _embed_by_hash(embedder, _plan_chunks(chunks, existing, rescope=rescope).fresh)
    now = datetime.now(UTC)

    async def work(conn: asyncpg.Connection) -> UploadResult:
        await chunk_repo.lock_path(conn, tenant_id=tenant_id, path=path)
        # Another upload of the path may have committed since the snapshot: plan again on what is
        # stored now; a chunk the snapshot did not foresee (rare) is embedded here.
        stored = await doc_repo.get_document(conn, tenant_id=tenant_id, path=path)
        if _unchanged(stored, file_hash, scope):
            return UploadResult(path=path, chunks=len(chunks), embedded=0, unchanged=True)
        existing = await chunk_repo.chunks_of_path(conn, tenant_id=tenant_id, kind="document", path=path)
        plan = _plan_chunks(chunks, existing, rescope=stored is not None and stored.scope != scope)
        if embedder is not None:
            vectors.update(
                await _embed_by_hash(embedder, [c for c in plan.fresh if c.content_hash not in vectors])
            )
        fresh = [
            memory_repo.NewMemory(
                id=uuid.uuid4(),
                kind="document",
                content=chunk.content,
                search_text=search_text_for(chunk.content, path_terms(path)),
                script=dominant_script(chunk.content),
                created_at=now,
                scope=scope,
                path=path,
                start_line=chunk.start_line,
                end_line=chunk.end_line,
                content_hash=chunk.content_hash,
                embedding=vectors[chunk.content_hash][0] if chunk.content_hash in vectors else None,
                embedding_next=vectors[chunk.content_hash][1] if chunk.content_hash in vectors else None,
            )
            for chunk in plan.fresh
        ]
        await memory_repo.delete_memories(conn, tenant_id=tenant_id, ids=plan.removed)
        await chunk_repo.move_chunks(conn, tenant_id=tenant_id, moves=plan.moves)
        await memory_repo.insert_memories(conn, tenant_id=tenant_id, rows=fresh)
        if fresh:
            await ensure_within_quota(conn, tenant_id=tenant_id, quota=quota)
        await doc_repo.upsert_document(
            conn, tenant_id=tenant_id, path=path, content=content, content_hash=file_hash, scope=scope
        )
        return UploadResult(path=path, chunks=len(chunks), embedded=len(fresh), unchanged=False)

    # A deadlock or serialization failure with a concurrent writer rolls the try back whole and
    # runs it again; vectors embedded by a failed try are kept, they depend on the text alone.
    return await db.run([tenant_id], work)


def _unchanged(stored: doc_repo.StoredDocument | None, file_hash: str, scope: str) -> bool:
    return stored is not None and stored.content_hash == file_hash and stored.scope == scope


async def read_slice(
    db: Database, principal: Principal, *, path: str, start: int | None, lines: int | None
) -> dict[str, Any]:
    """Lines [start, start + lines) of a stored file (1-based), or the whole file."""
    path = validate_document_path(path)
    async with db.transaction([principal.tenant_id], readonly=True) as conn:
        stored = await doc_repo.get_document(conn, tenant_id=principal.tenant_id, path=path)
    if stored is None:
        raise not_found("document")
    all_lines = file_lines(stored.content)
    first = start or 1
    if first > max(len(all_lines), 1):
        raise ApiError(
            422, "validation_error", f"from={first} is past the end of the file ({len(all_lines)} lines)"
        )
    last = len(all_lines) if lines is None else min(len(all_lines), first - 1 + lines)
    content = "\n".join(all_lines[first - 1 : last])
    if lines is None and stored.content.endswith("\n"):
        content += "\n"  # the rest of the file is served as stored; a counted slice is its lines alone
    return {
        "path": stored.path,
        "from": first,
        "to": last,
        "total_lines": len(all_lines),
        "content": content,
        "content_hash": stored.content_hash,
    }


def file_lines(content: str) -> list[str]:
    """The file's lines: a final newline ends the last line, it does not start another."""
    lines = content.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines


async def delete(db: Database, principal: Principal, *, path: str) -> None:
    """Forget a file and all its chunks."""
    path = validate_document_path(path)
    tenant_id = principal.tenant_id

    async def work(conn: asyncpg.Connection) -> None:
        # The upload's lock: a delete racing a re-upload of the path must not orphan its chunks.
        await chunk_repo.lock_path(conn, tenant_id=tenant_id, path=path)
        if not await doc_repo.delete_document(conn, tenant_id=tenant_id, path=path):
            raise not_found("document")

    await db.run([tenant_id], work)


async def list_paths(db: Database, principal: Principal) -> list[dict[str, str]]:
    """Every stored file with its content hash (the index command skips unchanged files with it)."""
    async with db.transaction([principal.tenant_id], readonly=True) as conn:
        rows = await doc_repo.list_documents(conn, tenant_id=principal.tenant_id)
    return [{"path": path, "content_hash": content_hash} for path, content_hash in rows]
