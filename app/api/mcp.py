"""MCP over streamable HTTP (JSON responses): the same operations as tools, same auth, same services."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import asyncpg
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from app.api.code import ResearchIn
from app.api.deps import ConnDep, StateDep, get_principal
from app.api.schemas import EpisodeIn, FactIn, RecallIn, RuleIn, SearchIn, StrictModel
from app.auth import Principal, Role
from app.errors import ApiError
from app.services import code as code_service
from app.services import memories as memory_service
from app.services import search as search_service
from app.state import ServiceState

router = APIRouter(tags=["mcp"])

PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")
JSON = dict[str, Any]


class MemoryGetIn(StrictModel):
    """memory_get arguments."""

    id: UUID


Handler = Callable[[ServiceState, asyncpg.Connection, Principal, Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Tool:
    """An MCP tool backed by one service call."""

    name: str
    description: str
    model: type[BaseModel]
    role: Role
    handler: Handler


async def _search(state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: SearchIn) -> Any:
    return (await search_service.search(state, conn, principal, body))[0]


async def _recall(state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: RecallIn) -> Any:
    return (await search_service.recall(state, conn, principal, body))[0]


async def _get(state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: MemoryGetIn) -> Any:
    return await memory_service.get_memory(conn, principal, body.id)


async def _store(
    state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: FactIn | RuleIn | EpisodeIn
) -> Any:
    return (await memory_service.write_memories(conn, state.embedder, principal, [body]))[0]


async def _research(
    state: ServiceState, conn: asyncpg.Connection, principal: Principal, body: ResearchIn
) -> Any:
    return await code_service.answer(
        conn,
        principal,
        query=body.query,
        kind=body.kind,
        symbol=body.symbol,
        depth=body.depth,
        repository=body.repository,
    )


TOOLS = {
    tool.name: tool
    for tool in (
        Tool(
            "memory_search",
            "Hybrid (BM25 + vector) search over memories, documents and code.",
            SearchIn,
            "reader",
            _search,
        ),
        Tool(
            "memory_recall",
            "Facts and rules for a topic, ranked by relevance, importance, recency, confidence.",
            RecallIn,
            "reader",
            _recall,
        ),
        Tool("memory_get", "One memory by id.", MemoryGetIn, "reader", _get),
        Tool("memory_store_fact", "Store a fact.", FactIn, "writer", _store),
        Tool("memory_store_rule", "Store a rule or preference.", RuleIn, "writer", _store),
        Tool("memory_store_episode", "Store an episode an agent lived through.", EpisodeIn, "writer", _store),
        Tool(
            "code_research",
            "Implementations, callers, callees, related components, module dependencies.",
            ResearchIn,
            "reader",
            _research,
        ),
    )
}


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
    output = await tool.handler(state, conn, principal, arguments)
    payload = json.loads(json.dumps(output, default=str))
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
    responses={202: {"description": "Notification accepted."}},
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
