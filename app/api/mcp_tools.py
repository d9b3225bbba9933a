"""The MCP tools: one per REST operation, same input models, same services, same response models."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, get_args
from uuid import UUID

import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field

from app.api.mcp_schemas import input_schema, output_schema
from app.api.schemas.code import (
    CodeFileList,
    CodeFilesIn,
    CodeIndexOut,
    RepositoryName,
    ResearchIn,
    ResearchOut,
    index_body,
    listing_body,
)
from app.api.schemas.common import MemoryType, ScopeName, StrictModel
from app.api.schemas.documents import DocumentIn, DocumentList, DocumentOut, DocumentSlice, upload_body
from app.api.schemas.memories import BatchIn, BatchOut, EpisodeIn, FactIn, MemoryOut, MemoryPage, RuleIn
from app.api.schemas.retrieval import RecallIn, RecallOut, SearchIn, SearchOut
from app.auth import Principal, Role
from app.db import Database
from app.errors import ApiError
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

# Groups of tools (and of parameters) a connection lists. What an agent needs is listed by default;
# the rest is opted into with `/mcp?toolsets=code,tuning` (or `all`), so an agent does not pay for
# schemas it never uses on every turn. Listing is all a toolset changes: any tool the key's role
# allows can be called, with any parameter of its REST operation.
Toolset = Literal["memory", "documents", "curation", "import", "scopes", "code", "tuning"]
TOOLSETS: tuple[Toolset, ...] = get_args(Toolset)
DEFAULT_TOOLSETS: frozenset[Toolset] = frozenset({"memory", "documents"})
# A parameter listed only for operator keys (cross-tenant reads), whatever the toolsets.
OPERATOR: Literal["operator"] = "operator"
Gate = Toolset | Literal["operator"]

# What a tool does to the tenant's memory, as MCP tool annotations. Every tool works on recalld's
# own store only (a closed world). Reads count as read-only although they bump reference counts:
# that bookkeeping changes nothing an agent stored.
Effect = Literal["read", "add", "update", "replace", "delete"]
_ANNOTATIONS: dict[Effect, types.ToolAnnotations] = {
    "read": types.ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    ),
    # Each call stores one more memory (unless its idempotency_key was seen).
    "add": types.ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
    ),
    "update": types.ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
    ),
    # Overwrites what was stored under the same name (a file, a scope's settings).
    "replace": types.ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
    ),
    "delete": types.ToolAnnotations(
        read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
    ),
}


@dataclass(frozen=True, slots=True)
class Tool:
    """An MCP tool: the REST operation of the same name, run through its service."""

    name: str
    description: str
    arguments: type[BaseModel]
    role: Role
    run: Run
    # Results are validated and serialised by this model, like the REST response body.
    output: type[BaseModel]
    toolset: Toolset
    effect: Effect
    # Parameters listed only when their gate is open; the rest of `arguments` always is.
    gated: Mapping[str, Gate] = field(default_factory=dict)
    # Shorter descriptions of parameters whose REST description is written for the docs page.
    hints: Mapping[str, str] = field(default_factory=dict)
    # Like the REST route's response_model_exclude_none.
    exclude_none: bool = False

    @property
    def annotations(self) -> types.ToolAnnotations:
        """The MCP annotations of this tool's effect."""
        return _ANNOTATIONS[self.effect]

    def describe(self, open_gates: frozenset[Gate]) -> types.Tool:
        """The tools/list entry, with the parameters `open_gates` allow."""
        hidden = [name for name, gate in self.gated.items() if gate not in open_gates]
        return types.Tool(
            name=self.name,
            description=self.description,
            input_schema=input_schema(self.arguments, hidden=hidden, hints=dict(self.hints)),
            output_schema=output_schema(self.output),
            annotations=self.annotations,
        )

    def serialise(self, result: Any) -> dict[str, Any]:
        """The result as a JSON object shaped like the REST response body."""
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


_SEARCH_GATES: dict[str, Gate] = {
    "tenants": OPERATOR,
    "all_tenants": OPERATOR,
    "repository": "code",
    "file_filter": "code",
    "exclude_filter": "code",
    "symbol": "code",
    "depth": "code",
    "fusion": "tuning",
    "weights": "tuning",
    "min_similarity": "tuning",
    "min_confidence": "tuning",
    "half_life_days": "tuning",
    "exact": "tuning",
    "rerank": "tuning",
    "diversity": "tuning",
}
_SEARCH_HINTS = {
    "query": "Words, a question or code.",
    "mode": "hybrid (keyword + semantic), semantic or keyword.",
    "types": "Kinds to search (default: all but code).",
    "scope": "Search `global` and this scope (episodes: this butler's).",
    "limit": "Most results, 1-100.",
    "context_window": "Episode hits: attach up to this many turns before and after, of the same session, "
    "as `context` (0-10).",
}
_RECALL_GATES: dict[str, Gate] = {
    "tenants": OPERATOR,
    "all_tenants": OPERATOR,
    "min_confidence": "tuning",
    "score_weights": "tuning",
}
# Back-dating is for importing what happened before; an agent writing as it goes leaves them unset.
_WRITE_GATES: dict[str, Gate] = {"created_at": "import", "last_confirmed_at": "import"}
_WRITE_HINTS = {
    "tags": "Labels (search can filter by them).",
    "metadata": "Any JSON object (<= 16 KiB), returned as stored.",
    "idempotency_key": "A retry with the same key returns the first result instead of a duplicate.",
}

TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            "memory_search",
            "Find stored memories (facts, rules, episodes, memory-file chunks) by meaning and keywords. "
            "Best first, each with its score, highlights and why it ranked there.",
            SearchIn,
            "reader",
            _search,
            SearchOut,
            "memory",
            "read",
            gated=_SEARCH_GATES,
            hints=_SEARCH_HINTS,
        ),
        Tool(
            "memory_recall",
            "The facts and rules to keep in mind for a topic, ranked by relevance, importance, recency "
            "and confidence.",
            RecallIn,
            "reader",
            _recall,
            RecallOut,
            "memory",
            "read",
            gated=_RECALL_GATES,
        ),
        Tool("memory_get", "One memory by id.", MemoryIdIn, "reader", _get, MemoryOut, "memory", "read"),
        Tool(
            "memory_list",
            "Memories of one kind (and scope), newest first, a page at a time.",
            MemoryListIn,
            "reader",
            _list,
            MemoryPage,
            "curation",
            "read",
        ),
        Tool(
            "memory_store_fact",
            "Remember a fact. Its confidence fades unless confirmed; `supersedes` replaces an older fact.",
            FactIn,
            "writer",
            _store,
            MemoryOut,
            "memory",
            "add",
            gated=_WRITE_GATES,
            hints=_WRITE_HINTS,
        ),
        Tool(
            "memory_store_rule",
            "Remember a rule or preference to follow.",
            RuleIn,
            "writer",
            _store,
            MemoryOut,
            "memory",
            "add",
            gated=_WRITE_GATES,
            hints=_WRITE_HINTS,
        ),
        Tool(
            "memory_store_episode",
            "Remember something that happened to an agent (`butler`); it expires after 7 days unless "
            "`expires_at` says otherwise.",
            EpisodeIn,
            "writer",
            _store,
            MemoryOut,
            "memory",
            "add",
            gated=_WRITE_GATES,
            hints=_WRITE_HINTS,
        ),
        Tool(
            "memory_store_batch",
            "Store 1–1,000 facts, rules and episodes, all or nothing.",
            BatchIn,
            "writer",
            _store_batch,
            BatchOut,
            "import",
            "add",
        ),
        Tool(
            "memory_confirm",
            "Confirm a fact or rule is still true: its confidence is whole again.",
            MemoryIdIn,
            "writer",
            _confirm,
            MemoryOut,
            "curation",
            "update",
        ),
        Tool(
            "memory_forget",
            "Delete a memory for good.",
            MemoryIdIn,
            "writer",
            _forget,
            MemoryForgotten,
            "memory",
            "delete",
        ),
        Tool(
            "scope_settings_put",
            "Replace a scope's retrieval settings (recall weights, fusion, half-lives, reranking).",
            ScopeSettingsIn,
            "admin",
            _scope_put,
            ScopeSettings,
            "scopes",
            "replace",
            exclude_none=True,
        ),
        Tool(
            "scope_settings_get",
            "A scope's retrieval settings.",
            ScopeIn,
            "reader",
            _scope_get,
            ScopeSettings,
            "scopes",
            "read",
            exclude_none=True,
        ),
        Tool(
            "document_put",
            "Store or replace a markdown memory file (MEMORY.md, memory/YYYY-MM-DD.md); search finds "
            "its chunks.",
            DocumentIn,
            "writer",
            _document_put,
            DocumentOut,
            "documents",
            "replace",
        ),
        Tool(
            "document_get",
            "Lines of a stored memory file (the whole file without from/lines).",
            DocumentSliceIn,
            "reader",
            _document_get,
            DocumentSlice,
            "documents",
            "read",
        ),
        Tool(
            "document_delete",
            "Delete a memory file.",
            DocumentPathIn,
            "writer",
            _document_delete,
            DocumentDeleted,
            "documents",
            "delete",
        ),
        Tool(
            "document_list",
            "Every stored memory file.",
            NoArguments,
            "reader",
            _document_list,
            DocumentList,
            "documents",
            "read",
        ),
        Tool(
            "code_index_files",
            "Index source files of a repository at symbol boundaries.",
            CodeFilesIn,
            "writer",
            _code_index,
            CodeIndexOut,
            "code",
            "replace",
        ),
        Tool(
            "code_list_files",
            "Indexed files of a repository.",
            RepositoryIn,
            "reader",
            _code_list,
            CodeFileList,
            "code",
            "read",
        ),
        Tool(
            "code_delete_file",
            "Remove a source file from the index.",
            CodeFileRefIn,
            "writer",
            _code_delete,
            CodeFileDeleted,
            "code",
            "delete",
        ),
        Tool(
            "code_research",
            "Implementations, callers, callees, related components, module dependencies.",
            ResearchIn,
            "reader",
            _research,
            ResearchOut,
            "code",
            "read",
        ),
    )
}


@lru_cache(maxsize=256)
def _described(name: str, gates: frozenset[Gate]) -> types.Tool:
    return TOOLS[name].describe(gates)


def listed_tools(principal: Principal, toolsets: frozenset[Toolset]) -> list[types.Tool]:
    """The tools/list answer: the tools of `toolsets` the key's role may call."""
    gates: frozenset[Gate] = frozenset(toolsets) | ({OPERATOR} if principal.operator else frozenset())
    return [
        _described(tool.name, gates)
        for tool in TOOLS.values()
        if tool.toolset in toolsets and principal.may(tool.role)
    ]


def toolsets_for(asked: str | None) -> frozenset[Toolset]:
    """The toolsets a connection lists: the defaults plus `asked`, the /mcp URL's `toolsets` parameter.

    `asked` is comma-separated toolset names; `all` is every one.
    """
    chosen: set[Toolset] = set(DEFAULT_TOOLSETS)
    for name in (part.strip() for part in (asked or "").split(",")):
        if name == "all":
            chosen.update(TOOLSETS)
        elif name in TOOLSETS:
            chosen.add(name)
        elif name:
            raise ApiError(
                422,
                "validation_error",
                f"unknown toolset {name!r} in /mcp?toolsets=: choose from {', '.join((*TOOLSETS, 'all'))}",
            )
    return frozenset(chosen)
