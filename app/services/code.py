"""Code index: ingest files into chunks + symbols + edges, and answer structural questions."""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg

from app.auth import Principal
from app.db import tenant_transaction
from app.embeddings.base import Embedder
from app.errors import ApiError, not_found
from app.hashing import content_hash
from app.ingest.code_parser import CodeChunk, parse_code, split_identifier
from app.ingest.paths import detect_language, path_terms, validate_relative_path
from app.repositories import code as code_repo
from app.repositories import memories as memory_repo
from app.retrieval.query import search_text_for

STRUCTURAL = ("calls", "inherits", "conforms", "extends")
MAX_CODE_FILE_BYTES = 1024 * 1024


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
    conn: asyncpg.Connection,
    embedder: Embedder | None,
    principal: Principal,
    *,
    repository: str,
    files: list[tuple[str, str]],
) -> IngestStats:
    """Index files of a repository; files whose content hash is unchanged are skipped."""
    tenant_id = principal.tenant_id
    stats = IngestStats()
    for path, _ in files:
        validate_relative_path(path)
    async with tenant_transaction(conn, [tenant_id], readonly=True):
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
        chunks = parse_code(path, content)
        rows = [
            memory_repo.NewMemory(
                id=uuid.uuid4(),
                kind="code",
                content=chunk.content,
                search_text=search_text_for(chunk.content, chunk_search_terms(path, chunk)),
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
        async with tenant_transaction(conn, [tenant_id]):
            await memory_repo.lock_path(conn, tenant_id=tenant_id, path=f"{repository}:{path}")
            await code_repo.delete_file(conn, tenant_id=tenant_id, repository=repository, path=path)
            await memory_repo.insert_memories(conn, tenant_id=tenant_id, rows=rows)
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


async def list_files(conn: asyncpg.Connection, principal: Principal, *, repository: str) -> dict[str, str]:
    """path -> content hash of a repository's indexed files."""
    async with tenant_transaction(conn, [principal.tenant_id], readonly=True):
        return await code_repo.list_files(conn, tenant_id=principal.tenant_id, repository=repository)


async def delete_file(conn: asyncpg.Connection, principal: Principal, *, repository: str, path: str) -> None:
    """Forget one indexed file."""
    async with tenant_transaction(conn, [principal.tenant_id]):
        if not await code_repo.delete_file(
            conn, tenant_id=principal.tenant_id, repository=repository, path=path
        ):
            raise not_found("file")


# --- code_research -------------------------------------------------------------------------

_WORD_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("implementations", re.compile(r"\b(?:implementations?|implementers|conformances?) of\s+(\w+)", re.I)),
    ("implementations", re.compile(r"\bwhat (?:implements|conforms to|inherits from|extends)\s+(\w+)", re.I)),
    ("callers", re.compile(r"\bwhat calls\s+(\w+)", re.I)),
    ("callers", re.compile(r"\b(?:callers|usages|uses) of\s+(\w+)", re.I)),
    ("callers", re.compile(r"\bwho calls\s+(\w+)", re.I)),
    ("callees", re.compile(r"\bwhat does\s+(\w+)\s+call", re.I)),
    ("callees", re.compile(r"\bcallees of\s+(\w+)", re.I)),
    ("dependencies", re.compile(r"\bdependencies of (?:module |package |directory )?([\w./-]+)", re.I)),
    ("dependencies", re.compile(r"\bwhat does (?:module |package )?([\w./-]+) (?:import|depend on)", re.I)),
    ("related", re.compile(r"\b(?:related to|components related to|similar to)\s+(\w+)", re.I)),
)


def parse_research_query(text: str) -> tuple[str, str]:
    """(kind, symbol) from a question in words, or a 422 listing what is understood."""
    for kind, pattern in _WORD_PATTERNS:
        match = pattern.search(text)
        if match:
            return kind, match.group(1)
    raise ApiError(
        422,
        "validation_error",
        "could not read the question; try 'implementations of X', 'what calls X', 'what does X call', "
        "'related to X', 'dependencies of module M', or send {kind, symbol}",
    )


def _item(loc: code_repo.CodeLocation, relation: str, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "symbol": loc.symbol,
        "symbol_kind": loc.symbol_kind,
        "parent_symbol": loc.parent_symbol,
        "path": loc.path,
        "start_line": loc.start_line,
        "end_line": loc.end_line,
        "relation": relation,
        "chunk_id": str(loc.chunk_id),
    }
    if loc.line is not None:
        out["line"] = loc.line
    out.update(extra)
    return out


async def research(
    conn: asyncpg.Connection,
    principal: Principal,
    *,
    kind: str,
    symbol: str,
    depth: int,
    repository: str | None,
) -> list[dict[str, Any]]:
    """Answer one structural question from the stored symbols and edges."""
    tid = principal.tenant_id
    async with tenant_transaction(conn, [tid], readonly=True):
        if kind == "implementations":
            return await _implementations(conn, tid, repository, symbol)
        if kind == "callers":
            return await _callers(conn, tid, repository, symbol, depth)
        if kind == "callees":
            return await _callees(conn, tid, repository, symbol, depth)
        if kind == "related":
            return await _related(conn, tid, repository, symbol)
        return await _dependencies(conn, tid, repository, symbol)


async def _implementations(
    conn: asyncpg.Connection, tid: str, repository: str | None, symbol: str
) -> list[dict[str, Any]]:
    found = await code_repo.references_to(
        conn, tenant_id=tid, repository=repository, names=[symbol], relations=("conforms", "inherits")
    )
    items = []
    seen: set[tuple[str, str | None, int]] = set()
    for loc in found:
        key = (loc.path, loc.symbol, loc.start_line)
        if key in seen:
            continue
        seen.add(key)
        via = "extension" if loc.symbol_kind == "extension" else "declaration"
        items.append(_item(loc, loc.relation or "conforms", via=via))
    return items


async def _callers(
    conn: asyncpg.Connection, tid: str, repository: str | None, symbol: str, depth: int
) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    seen: set[uuid.UUID] = set()
    frontier: dict[str, list[str]] = {symbol: [symbol]}
    for hop in range(1, depth + 1):
        found = await code_repo.references_to(
            conn, tenant_id=tid, repository=repository, names=list(frontier), relations=("calls",)
        )
        next_frontier: dict[str, list[str]] = {}
        for loc in found:
            if loc.chunk_id in seen:
                continue
            seen.add(loc.chunk_id)
            chain = [loc.symbol or loc.path, *frontier[loc.target or symbol]]
            items.append(_item(loc, "calls", depth=hop, chain=chain))
            if loc.symbol and loc.symbol not in next_frontier:
                next_frontier[loc.symbol] = chain
        if not next_frontier:
            break
        frontier = next_frontier
    return items


async def _callees(
    conn: asyncpg.Connection, tid: str, repository: str | None, symbol: str, depth: int
) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    sources = await code_repo.definitions(conn, tenant_id=tid, repository=repository, names=[symbol])
    chains = {loc.chunk_id: [symbol] for loc in sources}
    seen = set(chains)
    for hop in range(1, depth + 1):
        calls = await code_repo.references_from(
            conn, tenant_id=tid, chunk_ids=list(chains), relations=("calls",)
        )
        next_chains: dict[uuid.UUID, list[str]] = {}
        targets_by_name: dict[str, list[str]] = {}
        for call in calls:
            targets_by_name.setdefault(call.target or "", chains[call.chunk_id])
        defined = await code_repo.definitions(
            conn, tenant_id=tid, repository=repository, names=list(targets_by_name)
        )
        for loc in defined:
            if loc.chunk_id in seen:
                continue
            seen.add(loc.chunk_id)
            chain = [*targets_by_name[loc.symbol or ""], loc.symbol or loc.path]
            items.append(_item(loc, "called_by", depth=hop, chain=chain))
            next_chains[loc.chunk_id] = chain
        if not next_chains:
            break
        chains = next_chains
    return items


async def _related(
    conn: asyncpg.Connection, tid: str, repository: str | None, symbol: str
) -> list[dict[str, Any]]:
    sources = await code_repo.definitions(conn, tenant_id=tid, repository=repository, names=[symbol])
    if not sources:
        return []
    refs = await code_repo.references_from(
        conn, tenant_id=tid, chunk_ids=[s.chunk_id for s in sources], relations=STRUCTURAL
    )
    names = sorted({r.target for r in refs if r.target and r.target != symbol})
    if not names:
        return []
    sharing = await code_repo.references_to(
        conn, tenant_id=tid, repository=repository, names=names, relations=STRUCTURAL
    )
    source_ids = {s.chunk_id for s in sources}
    shared: dict[uuid.UUID, set[str]] = defaultdict(set)
    where: dict[uuid.UUID, code_repo.CodeLocation] = {}
    for loc in sharing:
        if loc.chunk_id in source_ids or not loc.target:
            continue
        shared[loc.chunk_id].add(loc.target)
        where[loc.chunk_id] = loc
    ranked = sorted(shared, key=lambda cid: (-len(shared[cid]), where[cid].path, where[cid].start_line))
    return [
        _item(
            code_repo.CodeLocation(
                where[cid].chunk_id,
                where[cid].path,
                where[cid].symbol,
                where[cid].symbol_kind,
                where[cid].parent_symbol,
                where[cid].start_line,
                where[cid].end_line,
            ),
            "shares_references",
            shared=sorted(shared[cid]),
        )
        for cid in ranked[:50]
    ]


def _module_of(path: str) -> str:
    parent = path.rsplit("/", 1)[0] if "/" in path else "."
    return parent


async def _dependencies(
    conn: asyncpg.Connection, tid: str, repository: str | None, module: str
) -> list[dict[str, Any]]:
    prefix = module.strip("/")
    imports = await code_repo.imports_under(conn, tenant_id=tid, repository=repository, prefix=None)
    paths = await code_repo.all_paths(conn, tenant_id=tid, repository=repository)
    modules = {_module_of(p) for p in paths}

    def in_module(path: str) -> bool:
        return (
            path.startswith(prefix + "/")
            or _module_of(path).split("/")[-1] == prefix
            or _module_of(path) == prefix
        )

    def resolve(target: str) -> str:
        # An import names a module by its last path segment (Swift, Go) or dotted path (Python).
        tail = target.replace(".", "/").strip("./").split("/")[-1]
        for candidate in sorted(modules):
            if candidate.split("/")[-1] == tail:
                return candidate
        return target

    if not any(in_module(p) for p in paths):
        raise ApiError(404, "not_found", f"no indexed files in module {module!r}")
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for path, target in imports:
        if in_module(path):
            key = ("imports", resolve(target))
            entry = out.setdefault(
                key, {"relation": "imports", "module": resolve(target), "import": target, "files": []}
            )
            entry["files"].append(path)
        elif _module_of(path) != prefix and resolve(target).split("/")[-1] == prefix.split("/")[-1]:
            key = ("imported_by", _module_of(path))
            entry = out.setdefault(
                key, {"relation": "imported_by", "module": _module_of(path), "import": target, "files": []}
            )
            entry["files"].append(path)
    return [out[k] for k in sorted(out)]


async def answer(
    conn: asyncpg.Connection,
    principal: Principal,
    *,
    query: str | None,
    kind: str | None,
    symbol: str | None,
    depth: int,
    repository: str | None,
) -> dict[str, Any]:
    """code_research: a structured question, or one in words, answered with its items."""
    if kind is None or symbol is None:
        assert query is not None
        kind, symbol = parse_research_query(query)
    items = await research(conn, principal, kind=kind, symbol=symbol, depth=depth, repository=repository)
    return {"kind": kind, "symbol": symbol, "items": items}
