"""MCP over streamable HTTP (JSON responses): the same operations as tools, same auth, same services."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import asyncpg
from fastapi import APIRouter, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.api import code as code_api
from app.api import documents as documents_api
from app.api import memories as memories_api
from app.api.code import CodeFilesIn, RepositoryName, ResearchIn
from app.api.deps import ConnDep, StateDep, get_principal
from app.api.documents import DocumentIn, DocumentList, DocumentOut, DocumentSlice
from app.api.schemas import (
    BatchIn,
    BatchOut,
    EpisodeIn,
    FactIn,
    MemoryOut,
    RecallIn,
    RecallOut,
    RuleIn,
    ScopeName,
    SearchIn,
    SearchOut,
    StrictModel,
)
from app.auth import Principal, Role
from app.db import tenant_transaction
from app.errors import ApiError
from app.services import memories as memory_service
from app.services import recall as recall_service
from app.services import search as search_service
from app.services.scopes import ScopeSettings, load_scope_settings, store_scope_settings
from app.state import ServiceState

router = APIRouter(tags=["mcp"])

PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")
JSON = dict[str, Any]


class MemoryIdIn(StrictModel):
    """Arguments naming one memory."""

    id: UUID = Field(..., description="Id of the memory.")


class DocumentPathIn(StrictModel):
    """Arguments naming one stored file."""

    path: str = Field(..., max_length=512, description="Path as uploaded.")


class DocumentSliceIn(DocumentPathIn):
    """document_get arguments: the whole file, or `lines` lines from `from`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_line: int | None = Field(None, alias="from", ge=1, description="First line (1-based).")
    lines: int | None = Field(None, ge=1, le=100_000, description="How many lines.")


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

    path: str = Field(..., max_length=512, description="Path as indexed.")


Handler = Callable[[ServiceState, asyncpg.Connection, Principal, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Tool:
    """An MCP tool backed by the service call (or route function) of the REST operation of that name."""

    name: str
    description: str
    model: type[BaseModel]
    role: Role
    handler: Handler
    # The REST response model: tool output is serialised exactly like the REST response body.
    output: type[BaseModel] | None = None


async def _search(state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: SearchIn) -> Any:
    return (await search_service.search(state, conn, principal, body.to_domain()))[0]


async def _recall(state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: RecallIn) -> Any:
    return (await recall_service.recall(state, conn, principal, body.to_domain()))[0]


async def _get(state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: MemoryIdIn) -> Any:
    return await memories_api.get_memory(body.id, conn, principal)


async def _store(
    state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: FactIn | RuleIn | EpisodeIn
) -> Any:
    return (await memory_service.write_memories(conn, state.embedder, principal, [body.to_draft()]))[0]


async def _store_batch(
    state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: BatchIn
) -> Any:
    return await memories_api.store_batch(body, state, conn, principal)


async def _confirm(
    state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: MemoryIdIn
) -> Any:
    return await memories_api.confirm_memory(body.id, conn, principal)


async def _forget(
    state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: MemoryIdIn
) -> Any:
    await memories_api.forget_memory(body.id, conn, principal)
    return {"id": str(body.id), "forgotten": True}


async def _scope_put(
    state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: ScopeSettingsIn
) -> Any:
    stored = await store_scope_settings(
        conn, tenant_id=principal.tenant_id, scope=body.scope, settings=body.settings
    )
    return stored.model_dump(exclude_none=True)


async def _scope_get(
    state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: ScopeIn
) -> Any:
    async with tenant_transaction(conn, [principal.tenant_id], readonly=True):
        found = await load_scope_settings(conn, tenant_id=principal.tenant_id, scope=body.scope)
    return found.model_dump(exclude_none=True)


async def _document_put(
    state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: DocumentIn
) -> Any:
    return await documents_api.put_document(body, state, conn, principal)


async def _document_get(
    state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: DocumentSliceIn
) -> Any:
    return await documents_api.get_document(
        conn, principal, path=body.path, from_line=body.from_line, lines=body.lines
    )


async def _document_delete(
    state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: DocumentPathIn
) -> Any:
    await documents_api.delete_document(conn, principal, path=body.path)
    return {"path": body.path, "deleted": True}


async def _document_list(
    state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: NoArguments
) -> Any:
    return await documents_api.list_documents(conn, principal)


async def _code_index(
    state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: CodeFilesIn
) -> Any:
    return await code_api.put_files(body, state, conn, principal)


async def _code_list(
    state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: RepositoryIn
) -> Any:
    return await code_api.list_files(conn, principal, body.repository)


async def _code_delete(
    state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: CodeFileRefIn
) -> Any:
    await code_api.delete_file(conn, principal, body.repository, body.path)
    return {"repository": body.repository, "path": body.path, "deleted": True}


async def _research(
    state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: ResearchIn
) -> Any:
    return await code_api.code_research(body, conn, principal)


TOOLS = {
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
        Tool("memory_forget", "Delete a memory for good.", MemoryIdIn, "writer", _forget),
        Tool(
            "scope_settings_put",
            "Set a scope's retrieval settings (recall weights, fusion, half-lives).",
            ScopeSettingsIn,
            "admin",
            _scope_put,
        ),
        Tool("scope_settings_get", "A scope's retrieval settings.", ScopeIn, "reader", _scope_get),
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
        Tool("document_delete", "Forget a memory file.", DocumentPathIn, "writer", _document_delete),
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
            "code_delete_file", "Remove a source file from the index.", CodeFileRefIn, "writer", _code_delete
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


def _serialise(tool: Tool, output: Any) -> Any:
    """The tool's output as JSON data, shaped like the REST response of the same operation."""
    if tool.output is None:
        return jsonable_encoder(output)
    return tool.output.model_validate(output).model_dump(mode="json", by_alias=True)


def _result(message_id: Any, result: JSON) -> JSON:
    return {"jsonrpc": "2.0", "id": message_id, "result": result}


def _error(message_id: Any, code: int, message: str, data: Any = None) -> JSON:
    error: JSON = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": message_id, "error": error}


async def _call_tool(
    state: ServiceState, conn: asyncpg.Connection, principal: Principal, params: JSON
) -> JSON:
    tool = TOOLS.get(str(params.get("name")))
    if tool is None:
        raise ApiError(404, "not_found", f"unknown tool {params.get('name')!r}")
    if not principal.may(tool.role):
        raise ApiError(
            403, "forbidden", f"{tool.name} needs the {tool.role} role; the key has {principal.role}"
        )
    arguments = tool.model.model_validate(params.get("arguments") or {})
    payload = _serialise(tool, await tool.handler(state, conn, principal, arguments))
    return {
        "content": [{"type": "text", "text": json.dumps(payload)}],
        "structuredContent": payload,
        "isError": False,
    }


async def _handle(
    state: ServiceState, conn: asyncpg.Connection, principal: Principal, message: JSON
) -> JSON | None:
    method = message.get("method")
    message_id = message.get("id")
    if message_id is None:
        return None  # a notification (e.g. notifications/initialized): nothing to answer
    params = message.get("params") or {}
    if not isinstance(params, dict):
        return _error(message_id, -32602, "invalid params: expected an object")
    if method == "initialize":
        requested = params.get("protocolVersion")
        version = requested if requested in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
        return _result(
            message_id,
            {
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "recalld", "version": "0.1.0"},
            },
        )
    if method == "ping":
        return _result(message_id, {})
    if method == "tools/list":
        tools = [
            {"name": t.name, "description": t.description, "inputSchema": t.model.model_json_schema()}
            for t in TOOLS.values()
            if principal.may(t.role)
        ]
        return _result(message_id, {"tools": tools})
    if method == "tools/call":
        try:
            return _result(message_id, await _call_tool(state, conn, principal, params))
        except ValidationError as exc:
            errors = json.loads(exc.json(include_url=False))
            text = (
                f"invalid arguments: {errors[0]['loc']}: {errors[0]['msg']}"
                if errors
                else "invalid arguments"
            )
            return _result(message_id, {"content": [{"type": "text", "text": text}], "isError": True})
        except ApiError as exc:
            body = {"error": {"code": exc.code, "message": exc.message, "details": exc.details}}
            return _result(
                message_id, {"content": [{"type": "text", "text": json.dumps(body)}], "isError": True}
            )
    return _error(message_id, -32601, f"method not found: {method}")


@router.post(
    "/mcp",
    operation_id="mcp",
    summary="MCP endpoint (streamable HTTP, JSON responses)",
    responses={
        200: {
            "description": "The JSON-RPC answer (an array for a batch).",
            "content": {
                "application/json": {
                    "example": {
                        "jsonrpc": "2.0",
                        "id": 1,
                        "result": {
                            "content": [{"type": "text", "text": '{"results": [], "mode": "hybrid"}'}],
                            "structuredContent": {"results": [], "mode": "hybrid"},
                            "isError": False,
                        },
                    }
                }
            },
        },
        202: {"description": "Notification accepted."},
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"type": "object", "description": "A JSON-RPC 2.0 message or a batch of them."},
                    "example": {
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "tools/call",
                        "params": {"name": "memory_search", "arguments": {"query": "what does the user eat"}},
                    },
                }
            },
        }
    },
)
async def mcp(request: Request, state: StateDep, conn: ConnDep) -> Response:
    """JSON-RPC 2.0: initialize, ping, tools/list, tools/call; authenticated like every /v1 call."""
    principal = await get_principal(request, conn)
    try:
        payload = json.loads(await request.body())
    except ValueError:
        return JSONResponse(_error(None, -32700, "parse error"), status_code=400)
    batch = payload if isinstance(payload, list) else [payload]
    if not batch or not all(isinstance(m, dict) for m in batch):
        return JSONResponse(_error(None, -32600, "invalid request"), status_code=400)
    answers = [a for m in batch if (a := await _handle(state, conn, principal, m)) is not None]
    if not answers:
        return Response(status_code=202)
    return JSONResponse(answers if isinstance(payload, list) else answers[0])
