"""code_research: implementations, callers, callees, related components and module dependencies."""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import Any

import asyncpg

from app.auth import Principal
from app.errors import ApiError
from app.infra.db import Database
from app.ingest.code_model import STRUCTURAL_RELATIONS
from app.repositories import code as code_repo
from app.retrieval.code_questions import parse_research_query


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
    db: Database,
    principal: Principal,
    *,
    kind: str,
    symbol: str,
    depth: int,
    repository: str | None,
) -> list[dict[str, Any]]:
    """Answer one structural question from the stored symbols and edges."""
    tid = principal.tenant_id
    async with db.transaction([tid], readonly=True) as conn:
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
        conn, tenant_id=tid, chunk_ids=[s.chunk_id for s in sources], relations=STRUCTURAL_RELATIONS
    )
    names = sorted({r.target for r in refs if r.target and r.target != symbol})
    if not names:
        return []
    sharing = await code_repo.references_to(
        conn, tenant_id=tid, repository=repository, names=names, relations=STRUCTURAL_RELATIONS
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
    db: Database,
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
    items = await research(db, principal, kind=kind, symbol=symbol, depth=depth, repository=repository)
    return {"kind": kind, "symbol": symbol, "items": items}
