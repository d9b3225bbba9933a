"""The MCP tools: one per REST operation, same input models, same services, same response models."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_jsonable_python

from app.api.schemas.code import CodeFilesIn, RepositoryName, ResearchIn, index_body, listing_body
from app.api.schemas.common import MemoryType, ScopeName, StrictModel
from app.api.schemas.documents import DocumentIn, DocumentList, DocumentOut, DocumentSlice, upload_body
from app.api.schemas.memories import BatchIn, BatchOut, EpisodeIn, FactIn, MemoryOut, MemoryPage, RuleIn
from app.api.schemas.retrieval import RecallIn, RecallOut, SearchIn, SearchOut
from app.auth import Principal, Role
from app.db import Database
from app.ingest.paths import MAX_PATH_CHARS
from app.input_rules import Integer
from app.services import code as code_service
from app.services import code_research
from app.services import documents as document_service
from app.services import memories as memory_service
from app.services import recall as recall_service
from app.services import search as search_service
from app.services.scopes import ScopeSettings, read_scope_settings, store_scope_settings
from app.state import ServiceState

# Arguments of the operations whose REST form takes them from the path or the query string.


class MemoryIdIn(StrictModel):
    """Arguments naming one memory."""

    id: UUID = Field(..., description="Id of the memory (from a write or a search).")


class MemoryListIn(StrictModel):
    """memory_list arguments: one kind, optionally one scope, a page at a time."""

    type: MemoryType = Field(..., description="Kind to list: fact, rule, episode, document or code.")
    scope: ScopeName | None = Field(None, description="Only memories stored with exactly this scope.")
    limit: Integer = Field(20, ge=1, le=100, description="Most memories on this page, 1–100 (default 20).")
    cursor: str | None = Field(
        None, max_length=200, description="`next_cursor` of the previous page; omit for the first page."
    )


class DocumentPathIn(StrictModel):
    """Arguments naming one stored file."""

    path: str = Field(..., max_length=MAX_PATH_CHARS, description="Path as uploaded.")


class DocumentSliceIn(DocumentPathIn):
    """document_get arguments: the whole file, or `lines` lines from `from`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_line: Integer | None = Field(
        None, alias="from", ge=1, description="First line (1-based); default 1."
    )
    lines: Integer | None = Field(None, ge=1, le=100_000, description="How many lines; default to the end.")


class NoArguments(StrictModel):
    """A tool without arguments."""


class ScopeIn(StrictModel):
    """Arguments naming one scope."""

    scope: ScopeName


class ScopeSettingsIn(ScopeIn):
    """scope_settings_put arguments."""

    settings: ScopeSettings = Field(..., description="The scope's new settings (replacing earlier ones).")


class RepositoryIn(StrictModel):
    """Arguments naming one repository."""

    repository: RepositoryName


class CodeFileRefIn(RepositoryIn):
    """Arguments naming one indexed source file."""

    path: str = Field(..., max_length=MAX_PATH_CHARS, description="Path as indexed.")


# What the tools answer where REST answers 204 or has no response model: MCP results are objects.


class MemoryForgotten(BaseModel):
    """memory_forget result."""

    id: UUID
    forgotten: bool


class DocumentDeleted(BaseModel):
    """document_delete result."""

    path: str
    deleted: bool


class CodeFileDeleted(BaseModel):
    """code_delete_file result."""

    repository: str
    path: str
    deleted: bool


Run = Callable[[ServiceState, Database, Principal, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Tool:
    """An MCP tool: the REST operation of the same name, run through its service."""

    name: str
    description: str
    arguments: type[BaseModel]
    role: Role
    run: Run
    # Results are validated and serialised by this model, like the REST response body; None: as is.
    output: type[BaseModel] | None = None
    # Like the REST route's response_model_exclude_none.
    exclude_none: bool = False

    def serialise(self, result: Any) -> dict[str, Any]:
        """The result as a JSON object shaped like the REST response body."""
        if self.output is None:
            # As FastAPI encodes a route's dict: UUIDs, datetimes and the like become JSON values.
            encoded: dict[str, Any] = to_jsonable_python(result)
            return encoded
        return self.output.model_validate(result).model_dump(
            mode="json", by_alias=True, exclude_none=self.exclude_none
        )


async def _search(state: ServiceState, db: Database, who: Principal, args: SearchIn) -> Any:
    return (await search_service.search(state, db, who, args.to_domain()))[0]


async def _recall(state: ServiceState, db: Database, who: Principal, args: RecallIn) -> Any:
    return (await recall_service.recall(state, db, who, args.to_domain()))[0]


async def _get(state: ServiceState, db: Database, who: Principal, args: MemoryIdIn) -> Any:
    return await memory_service.get_memory(db, who, args.id)


async def _list(state: ServiceState, db: Database, who: Principal, args: MemoryListIn) -> Any:
    return await memory_service.list_memories(
        db, who, kind=args.type, scope=args.scope, limit=args.limit, cursor=args.cursor
    )


async def _store(state: ServiceState, db: Database, who: Principal, args: FactIn | RuleIn | EpisodeIn) -> Any:
    return (
        await memory_service.write_memories(db, state.embedder, who, [args.to_draft()], quota=state.quota)
    )[0]


async def _store_batch(state: ServiceState, db: Database, who: Principal, args: BatchIn) -> Any:
    drafts = [item.to_draft() for item in args.items]
    return {"items": await memory_service.write_memories(db, state.embedder, who, drafts, quota=state.quota)}


async def _confirm(state: ServiceState, db: Database, who: Principal, args: MemoryIdIn) -> Any:
    return await memory_service.confirm(db, who, args.id)


async def _forget(state: ServiceState, db: Database, who: Principal, args: MemoryIdIn) -> Any:
    await memory_service.forget(db, state.embedder, who, args.id)
    return {"id": args.id, "forgotten": True}


async def _scope_put(state: ServiceState, db: Database, who: Principal, args: ScopeSettingsIn) -> Any:
    return await store_scope_settings(db, tenant_id=who.tenant_id, scope=args.scope, settings=args.settings)


async def _scope_get(state: ServiceState, db: Database, who: Principal, args: ScopeIn) -> Any:
    return await read_scope_settings(db, tenant_id=who.tenant_id, scope=args.scope)


async def _document_put(state: ServiceState, db: Database, who: Principal, args: DocumentIn) -> Any:
    result = await document_service.upload_document(
        db, state.embedder, who, path=args.path, content=args.content, scope=args.scope, quota=state.quota
    )
    return upload_body(result)


async def _document_get(state: ServiceState, db: Database, who: Principal, args: DocumentSliceIn) -> Any:
    return await document_service.read_slice(db, who, path=args.path, start=args.from_line, lines=args.lines)


async def _document_delete(state: ServiceState, db: Database, who: Principal, args: DocumentPathIn) -> Any:
    await document_service.delete(db, who, path=args.path)
    return {"path": args.path, "deleted": True}


async def _document_list(state: ServiceState, db: Database, who: Principal, args: NoArguments) -> Any:
    return {"documents": await document_service.list_paths(db, who)}


async def _code_index(state: ServiceState, db: Database, who: Principal, args: CodeFilesIn) -> Any:
    stats = await code_service.ingest_files(
        db,
        state.embedder,
        who,
        repository=args.repository,
        files=[(f.path, f.content) for f in args.files],
        quota=state.quota,
    )
    return index_body(args.repository, stats)


async def _code_list(state: ServiceState, db: Database, who: Principal, args: RepositoryIn) -> Any:
    files = await code_service.list_files(db, who, repository=args.repository)
    return listing_body(args.repository, files)


async def _code_delete(state: ServiceState, db: Database, who: Principal, args: CodeFileRefIn) -> Any:
    await code_service.delete_file(db, who, repository=args.repository, path=args.path)
    return {"repository": args.repository, "path": args.path, "deleted": True}


async def _research(state: ServiceState, db: Database, who: Principal, args: ResearchIn) -> Any:
    return await code_research.answer(
        db,
        who,
        query=args.query,
        kind=args.kind,
        symbol=args.symbol,
        depth=args.depth,
        repository=args.repository,
    )


TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            "memory_search",
            "Hybrid (BM25 + vector) search over memories, documents and code.",
            SearchIn,
            "reader",
            _search,
            SearchOut,
        ),
        Tool(
            "memory_recall",
            "Facts and rules for a topic, ranked by relevance, importance, recency, confidence.",
            RecallIn,
            "reader",
            _recall,
            RecallOut,
        ),
        Tool("memory_get", "One memory by id.", MemoryIdIn, "reader", _get, MemoryOut),
        Tool(
            "memory_list",
            "Stored memories of one kind (and scope), newest first, a page at a time.",
            MemoryListIn,
            "reader",
            _list,
            MemoryPage,
        ),
        Tool("memory_store_fact", "Store a fact.", FactIn, "writer", _store, MemoryOut),
        Tool("memory_store_rule", "Store a rule or preference.", RuleIn, "writer", _store, MemoryOut),
        Tool(
            "memory_store_episode",
            "Store an episode an agent lived through.",
            EpisodeIn,
            "writer",
            _store,
            MemoryOut,
        ),
        Tool(
            "memory_store_batch",
            "Store up to 1,000 facts, rules and episodes, all or nothing.",
            BatchIn,
            "writer",
            _store_batch,
            BatchOut,
        ),
        Tool(
            "memory_confirm",
            "Confirm a fact or rule: its confidence is whole again.",
            MemoryIdIn,
            "writer",
            _confirm,
            MemoryOut,
        ),
        Tool("memory_forget", "Delete a memory for good.", MemoryIdIn, "writer", _forget, MemoryForgotten),
        Tool(
            "scope_settings_put",
            "Set a scope's retrieval settings (recall weights, fusion, half-lives).",
            ScopeSettingsIn,
            "admin",
            _scope_put,
            ScopeSettings,
            exclude_none=True,
        ),
        Tool(
            "scope_settings_get",
            "A scope's retrieval settings.",
            ScopeIn,
            "reader",
            _scope_get,
            ScopeSettings,
            exclude_none=True,
        ),
        Tool(
            "document_put",
            "Upload a markdown memory file (MEMORY.md, memory/YYYY-MM-DD.md); unchanged chunks are kept.",
            DocumentIn,
            "writer",
            _document_put,
            DocumentOut,
        ),
        Tool(
            "document_get",
            "Lines of a stored memory file (the whole file without from/lines).",
            DocumentSliceIn,
            "reader",
            _document_get,
            DocumentSlice,
        ),
        Tool(
            "document_delete",
            "Forget a memory file.",
            DocumentPathIn,
            "writer",
            _document_delete,
            DocumentDeleted,
        ),
        Tool(
            "document_list", "Every stored memory file.", NoArguments, "reader", _document_list, DocumentList
        ),
        Tool(
            "code_index_files",
            "Index source files of a repository at symbol boundaries.",
            CodeFilesIn,
            "writer",
            _code_index,
        ),
        Tool("code_list_files", "Indexed files of a repository.", RepositoryIn, "reader", _code_list),
        Tool(
            "code_delete_file",
            "Remove a source file from the index.",
            CodeFileRefIn,
            "writer",
            _code_delete,
            CodeFileDeleted,
        ),
        Tool(
            "code_research",
            "Implementations, callers, callees, related components, module dependencies.",
            ResearchIn,
            "reader",
            _research,
        ),
    )
}
