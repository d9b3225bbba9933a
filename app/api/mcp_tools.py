"""The MCP tools: one per REST operation, same input models, same services, same response models."""

from __future__ import annotations

from functools import lru_cache

import mcp_types as types

from app.api import mcp_calls as calls
from app.api.mcp_arguments import (
    CodeFileDeleted,
    CodeFileRefIn,
    DocumentDeleted,
    DocumentPathIn,
    DocumentSliceIn,
    MemoryForgotten,
    MemoryIdIn,
    MemoryListIn,
    NoArguments,
    RepositoryIn,
    ScopeIn,
    ScopeSettingsIn,
)
from app.api.mcp_tool import OPERATOR, Gate, Tool, Toolset
from app.api.schemas.code import (
    CodeFileList,
    CodeFilesIn,
    CodeIndexOut,
    ResearchIn,
    ResearchOut,
)
from app.api.schemas.documents import DocumentIn, DocumentList, DocumentOut, DocumentSlice
from app.api.schemas.memories import (
    BatchIn,
    BatchOut,
    EpisodeIn,
    FactIn,
    MemoryHistory,
    MemoryOut,
    MemoryPage,
    RuleIn,
)
from app.api.schemas.recall import RecallIn, RecallOut
from app.api.schemas.retrieval import SearchIn, SearchOut
from app.auth import Principal
from app.services.scopes import ScopeSettings

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
    "as_of": "curation",
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
    "as_of": "curation",
}
# The store tools declare MemoryOut: the answer's duplicate_of, superseded and similar_to come as
# extra fields, undeclared, since declaring them costs tools/list 280 characters per tool.
# Back-dating is for importing what happened before; an agent writing as it goes leaves them unset.
_WRITE_GATES: dict[str, Gate] = {
    "created_at": "import",
    "last_confirmed_at": "import",
    "valid_from": "import",
    "valid_to": "import",
}
_WRITE_HINTS = {
    "tags": "Labels (search can filter by them).",
    "metadata": "Any JSON object (<= 16 KiB), returned as stored.",
    "idempotency_key": "A retry with the same key returns the first result.",
}
_FACT_HINTS = {
    **_WRITE_HINTS,
    "supersede": '"subject_predicate": replaces older facts of this subject+predicate.',
    "supersedes": "Id of a fact this replaces.",
}

TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            "memory_search",
            "Find stored memories (facts, rules, episodes, memory-file chunks) by meaning and keywords. "
            "Best first, each with its score, highlights and why it ranked there. With the default fusion "
            "the score is the estimated probability (0-1) that the result is relevant; when nothing "
            "stored is relevant the answer is empty with abstained: true (min_score: 0 gives the "
            "best-effort list).",
            SearchIn,
            "reader",
            calls.memory_search,
            SearchOut,
            "memory",
            "read",
            gated=_SEARCH_GATES,
            hints=_SEARCH_HINTS,
        ),
        Tool(
            "memory_recall",
            "The facts and rules to keep in mind for a topic, ranked by relevance, importance, recency "
            "and confidence. A memory whose relevance (the probability it is relevant) is below the "
            "floor is never recalled; nothing relevant answers an empty list with abstained: true.",
            RecallIn,
            "reader",
            calls.memory_recall,
            RecallOut,
            "memory",
            "read",
            gated=_RECALL_GATES,
        ),
        Tool(
            "memory_get",
            "One memory by id.",
            MemoryIdIn,
            "reader",
            calls.memory_get,
            MemoryOut,
            "memory",
            "read",
        ),
        Tool(
            "memory_list",
            "Memories of one kind (and scope), newest first, a page at a time.",
            MemoryListIn,
            "reader",
            calls.memory_list,
            MemoryPage,
            "curation",
            "read",
        ),
        Tool(
            "memory_history",
            "How a fact changed: what it replaced or was replaced by, newest first.",
            MemoryIdIn,
            "reader",
            calls.memory_history,
            MemoryHistory,
            "curation",
            "read",
        ),
        Tool(
            "memory_store_fact",
            "Remember a fact; a repeat answers the stored one.",
            FactIn,
            "writer",
            calls.memory_store,
            MemoryOut,
            "memory",
            "add",
            gated=_WRITE_GATES,
            hints=_FACT_HINTS,
        ),
        Tool(
            "memory_store_rule",
            "Remember a rule or preference to follow.",
            RuleIn,
            "writer",
            calls.memory_store,
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
            calls.memory_store,
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
            calls.memory_store_batch,
            BatchOut,
            "import",
            "add",
        ),
        Tool(
            "memory_confirm",
            "Confirm a fact or rule is still true: its confidence is whole again.",
            MemoryIdIn,
            "writer",
            calls.memory_confirm,
            MemoryOut,
            "curation",
            "update",
        ),
        Tool(
            "memory_forget",
            "Delete a memory for good.",
            MemoryIdIn,
            "writer",
            calls.memory_forget,
            MemoryForgotten,
            "memory",
            "delete",
        ),
        Tool(
            "scope_settings_put",
            "Replace a scope's retrieval settings (recall weights, fusion, half-lives, reranking).",
            ScopeSettingsIn,
            "admin",
            calls.scope_settings_put,
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
            calls.scope_settings_get,
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
            calls.document_put,
            DocumentOut,
            "documents",
            "replace",
        ),
        Tool(
            "document_get",
            "Lines of a stored memory file (the whole file without from/lines).",
            DocumentSliceIn,
            "reader",
            calls.document_get,
            DocumentSlice,
            "documents",
            "read",
        ),
        Tool(
            "document_delete",
            "Delete a memory file.",
            DocumentPathIn,
            "writer",
            calls.document_delete,
            DocumentDeleted,
            "documents",
            "delete",
        ),
        Tool(
            "document_list",
            "Every stored memory file.",
            NoArguments,
            "reader",
            calls.document_list,
            DocumentList,
            "documents",
            "read",
        ),
        Tool(
            "code_index_files",
            "Index source files of a repository at symbol boundaries.",
            CodeFilesIn,
            "writer",
            calls.code_index_files,
            CodeIndexOut,
            "code",
            "replace",
        ),
        Tool(
            "code_list_files",
            "Indexed files of a repository.",
            RepositoryIn,
            "reader",
            calls.code_list_files,
            CodeFileList,
            "code",
            "read",
        ),
        Tool(
            "code_delete_file",
            "Remove a source file from the index.",
            CodeFileRefIn,
            "writer",
            calls.code_delete_file,
            CodeFileDeleted,
            "code",
            "delete",
        ),
        Tool(
            "code_research",
            "Implementations, callers, callees, related components, module dependencies.",
            ResearchIn,
            "reader",
            calls.code_research,
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
