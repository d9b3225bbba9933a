"""The service call behind each MCP tool: its arguments in, the REST response body's content out."""

from __future__ import annotations

from typing import Any

from app.api.mcp_arguments import (
    CodeFileRefIn,
    DocumentPathIn,
    DocumentSliceIn,
    MemoryIdIn,
    MemoryListIn,
    NoArguments,
    RepositoryIn,
    ScopeIn,
    ScopeSettingsIn,
)
from app.api.schemas.code import CodeFilesIn, ResearchIn, index_body, listing_body
from app.api.schemas.documents import DocumentIn, upload_body
from app.api.schemas.memories import BatchIn, EpisodeIn, FactIn, RuleIn
from app.api.schemas.recall import RecallIn
from app.api.schemas.retrieval import SearchIn
from app.auth import Principal
from app.db import Database
from app.services import code as code_service
from app.services import code_research as research_service
from app.services import documents as document_service
from app.services import memories as memory_service
from app.services import recall as recall_service
from app.services import search as search_service
from app.services.scopes import read_scope_settings, store_scope_settings
from app.state import ServiceState


async def memory_search(state: ServiceState, db: Database, who: Principal, args: SearchIn) -> Any:
    """Run a search; its response body."""
    return (await search_service.search(state, db, who, args.to_domain()))[0]


async def memory_recall(state: ServiceState, db: Database, who: Principal, args: RecallIn) -> Any:
    """Run a recall; its response body."""
    return (await recall_service.recall(state, db, who, args.to_domain()))[0]


async def memory_get(state: ServiceState, db: Database, who: Principal, args: MemoryIdIn) -> Any:
    """One memory by id."""
    return await memory_service.get_memory(db, who, args.id)


async def memory_list(state: ServiceState, db: Database, who: Principal, args: MemoryListIn) -> Any:
    """One page of memories."""
    return await memory_service.list_memories(
        db, who, kind=args.type, scope=args.scope, limit=args.limit, cursor=args.cursor, as_of=args.as_of
    )


async def memory_history(state: ServiceState, db: Database, who: Principal, args: MemoryIdIn) -> Any:
    """The supersession chain of a memory."""
    return await memory_service.memory_history(db, who, args.id)


async def memory_store(
    state: ServiceState, db: Database, who: Principal, args: FactIn | RuleIn | EpisodeIn
) -> Any:
    """Store one fact, rule or episode."""
    return (
        await memory_service.write_memories(db, state.embedder, who, [args.to_draft()], quota=state.quota)
    )[0]


async def memory_store_batch(state: ServiceState, db: Database, who: Principal, args: BatchIn) -> Any:
    """Store a batch, all or nothing."""
    drafts = [item.to_draft() for item in args.items]
    return {"items": await memory_service.write_memories(db, state.embedder, who, drafts, quota=state.quota)}


async def memory_confirm(state: ServiceState, db: Database, who: Principal, args: MemoryIdIn) -> Any:
    """Confirm a fact or rule."""
    return await memory_service.confirm(db, who, args.id)


async def memory_forget(state: ServiceState, db: Database, who: Principal, args: MemoryIdIn) -> Any:
    """Forget a memory; what REST answers with 204, as an object."""
    await memory_service.forget(db, state.embedder, who, args.id)
    return {"id": args.id, "forgotten": True}


async def scope_settings_put(state: ServiceState, db: Database, who: Principal, args: ScopeSettingsIn) -> Any:
    """Replace a scope's settings."""
    return await store_scope_settings(db, tenant_id=who.tenant_id, scope=args.scope, settings=args.settings)


async def scope_settings_get(state: ServiceState, db: Database, who: Principal, args: ScopeIn) -> Any:
    """A scope's settings."""
    return await read_scope_settings(db, tenant_id=who.tenant_id, scope=args.scope)


async def document_put(state: ServiceState, db: Database, who: Principal, args: DocumentIn) -> Any:
    """Upload a memory file."""
    result = await document_service.upload_document(
        db, state.embedder, who, path=args.path, content=args.content, scope=args.scope, quota=state.quota
    )
    return upload_body(result)


async def document_get(state: ServiceState, db: Database, who: Principal, args: DocumentSliceIn) -> Any:
    """Lines of a memory file."""
    return await document_service.read_slice(db, who, path=args.path, start=args.from_line, lines=args.lines)


async def document_delete(state: ServiceState, db: Database, who: Principal, args: DocumentPathIn) -> Any:
    """Forget a memory file; what REST answers with 204, as an object."""
    await document_service.delete(db, who, path=args.path)
    return {"path": args.path, "deleted": True}


async def document_list(state: ServiceState, db: Database, who: Principal, args: NoArguments) -> Any:
    """Every stored memory file."""
    return {"documents": await document_service.list_paths(db, who)}


async def code_index_files(state: ServiceState, db: Database, who: Principal, args: CodeFilesIn) -> Any:
    """Index source files."""
    stats = await code_service.ingest_files(
        db,
        state.embedder,
        who,
        repository=args.repository,
        files=[(f.path, f.content) for f in args.files],
        quota=state.quota,
    )
    return index_body(args.repository, stats)


async def code_list_files(state: ServiceState, db: Database, who: Principal, args: RepositoryIn) -> Any:
    """Indexed files of a repository."""
    files = await code_service.list_files(db, who, repository=args.repository)
    return listing_body(args.repository, files)


async def code_delete_file(state: ServiceState, db: Database, who: Principal, args: CodeFileRefIn) -> Any:
    """Remove a source file; what REST answers with 204, as an object."""
    await code_service.delete_file(db, who, repository=args.repository, path=args.path)
    return {"repository": args.repository, "path": args.path, "deleted": True}


async def code_research(state: ServiceState, db: Database, who: Principal, args: ResearchIn) -> Any:
    """Answer a structural question about code."""
    return await research_service.answer(
        db,
        who,
        query=args.query,
        kind=args.kind,
        symbol=args.symbol,
        depth=args.depth,
        repository=args.repository,
    )
