"""MCP at /mcp through the official SDK (streamable HTTP): same keys, roles and services as REST."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from fastapi import FastAPI
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from app.api.deps import ensure_role, get_principal, get_state
from app.api.mcp_tool import TOOLSETS, Tool, Toolset, toolsets_for
from app.api.mcp_tools import TOOLS, listed_tools
from app.auth import Principal
from app.errors import (
    ApiError,
    error_body,
    invalid_input,
    is_json_media_type,
    model_error_details,
    unsupported_media_type,
)
from app.infra.config import Settings
from app.redaction import describe_exception
from app.state import ServiceState
from app.web.http_errors import request_media_type

log = logging.getLogger("recalld.mcp")

MCP_PATH = "/mcp"
_CALLER = "recalld.mcp_caller"  # ASGI scope key: who is calling, set before the SDK sees the request
_PORT = re.compile(r"[0-9]{1,5}")


# /mcp is not a FastAPI route, so /docs learns about it from this path item.
OPENAPI_PATH_ITEM: dict[str, Any] = {
    "post": {
        "tags": ["mcp"],
        "operationId": "mcp",
        "summary": "MCP endpoint (streamable HTTP, stateless, JSON answers)",
        "description": "Model Context Protocol through the official SDK: `tools/list` shows the "
        "operations the key's role may call, each a tool named like its REST operation id and "
        "taking the same fields; `tools/call` answers the REST response body as structured "
        "content, or a tool error carrying the REST error body. One JSON-RPC message per request. "
        "By default the list holds the toolsets `memory` and `documents` (and, for operator keys, "
        "the cross-tenant parameters); `toolsets` adds more to the list. Any operation the role "
        "allows can be called, listed or not.",
        "parameters": [
            {
                "name": "toolsets",
                "in": "query",
                "required": False,
                "description": "Comma-separated toolsets to list besides the defaults: "
                + ", ".join(TOOLSETS)
                + ", or all.",
                "schema": {"type": "string"},
                "examples": {"code and tuning": {"value": "code,tuning"}},
            }
        ],
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"type": "object", "description": "One JSON-RPC 2.0 message (no batches)."},
                    "example": {
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "tools/call",
                        "params": {"name": "memory_search", "arguments": {"query": "what does the user eat"}},
                    },
                }
            },
        },
        "responses": {
            "200": {"description": "The JSON-RPC answer."},
            "202": {"description": "Notification accepted."},
            "403": {"description": "A browser Origin that is not allowed."},
        },
    }
}


@dataclass(frozen=True, slots=True)
class _Caller:
    state: ServiceState
    principal: Principal
    toolsets: frozenset[Toolset]


def origin_allowed(origin: str, allowed: Sequence[str]) -> bool:
    """True when `origin` is listed, or matches a listed `scheme://host:*` with a numeric port."""
    return any(
        origin == pattern
        or (
            pattern.endswith(":*")
            and origin.startswith(pattern[:-1])
            and _PORT.fullmatch(origin[len(pattern) - 1 :]) is not None
        )
        for pattern in allowed
    )


def _caller(ctx: ServerRequestContext[Any, Any]) -> _Caller:
    # The transports hand every message the HTTP request it came in; McpEndpoint put the caller in it.
    request = ctx.request
    if not isinstance(request, Request) or not isinstance(request.scope.get(_CALLER), _Caller):
        raise MCPError(types.INTERNAL_ERROR, "MCP is only served over HTTP at /mcp")
    caller: _Caller = request.scope[_CALLER]
    return caller


def _text(payload: dict[str, Any]) -> list[types.ContentBlock]:
    return [types.TextContent(type="text", text=json.dumps(payload, ensure_ascii=False))]


async def _list_tools(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    caller = _caller(ctx)
    return types.ListToolsResult(tools=listed_tools(caller.principal, caller.toolsets))


async def _run(tool: Tool, caller: _Caller, arguments: dict[str, Any]) -> dict[str, Any]:
    ensure_role(caller.principal, tool.role)
    try:
        parsed = tool.arguments.model_validate(arguments)
    except ValidationError as exc:
        raise invalid_input(model_error_details(exc)) from exc
    result = await tool.run(caller.state, caller.state.db, caller.principal, parsed)
    return tool.serialise(result)


async def _call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    tool = TOOLS.get(params.name)
    if tool is None:
        raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name!r}")
    caller = _caller(ctx)
    # Whatever a call does wrong, the answer is a tool error carrying the REST error body:
    # the exchange itself (and any later call on the same connection) is unaffected.
    try:
        payload = await _run(tool, caller, params.arguments or {})
    except ApiError as exc:
        return types.CallToolResult(
            content=_text(error_body(exc.code, exc.message, exc.details)), is_error=True
        )
    except Exception as exc:
        # Types and frames only: an exception's message can quote the caller's arguments.
        log.error("MCP tool %s failed\n%s", tool.name, describe_exception(exc))
        return types.CallToolResult(
            content=_text(error_body("internal_error", "internal server error")), is_error=True
        )
    return types.CallToolResult(content=_text(payload), structured_content=payload)


class McpEndpoint:
    """The /mcp route: Origin check, then bearer auth (401 like REST), then the SDK's transport."""

    def __init__(self, manager: StreamableHTTPSessionManager, allowed_origins: Sequence[str]) -> None:
        self.manager = manager
        self.allowed_origins = tuple(allowed_origins)
        # POST only: stateless, the server never writes to a client between requests, so a GET
        # (SSE stream) would only hold a connection open, and there is no session to DELETE.
        self.route = Route(MCP_PATH, self, methods=["POST"])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # FastAPI puts only its own routes in the scope; the latency metric reads the route there.
        scope["route"] = self.route
        request = Request(scope)
        # The streamable HTTP transport MUST check Origin: a web page must not reach a local
        # server through DNS rebinding. Agents and CLIs send no Origin and are let through.
        origin = request.headers.get("origin")
        if origin is not None and not origin_allowed(origin, self.allowed_origins):
            raise ApiError(
                403, "forbidden", f"origin {origin!r} may not call /mcp (RECALLD_MCP_ALLOWED_ORIGINS)"
            )
        state = await get_state(request)
        principal = await get_principal(request, state.db)
        media_type = request_media_type(request)
        if not is_json_media_type(media_type):
            # The SDK's own answer is a plain-text 400 quoting its validation text.
            raise unsupported_media_type(media_type)
        toolsets = toolsets_for(request.query_params.get("toolsets"))
        await self.manager.handle_request(
            {**scope, _CALLER: _Caller(state, principal, toolsets)}, receive, send
        )


def mount_mcp(app: FastAPI, settings: Settings) -> StreamableHTTPSessionManager:
    """Serve MCP at /mcp; the returned manager must run (`async with manager.run()`) in the lifespan."""
    server: Server[Any] = Server(
        "recalld",
        version=app.version,
        instructions="Long-term memory: store facts, rules, episodes, memory files and code; "
        "search and recall what is relevant.",
        on_list_tools=_list_tools,
        on_call_tool=_call_tool,
    )
    # Stateless: every request stands alone, so any worker or replica can answer it (a session
    # would live in one process's memory) and nothing outlives a request. The tools are plain
    # request/response, so the server never needs to reach a client between requests; JSON
    # answers (no SSE stream) follow from that.
    # BodyLimitMiddleware already holds /mcp to the upload cap; the SDK's own cap must not be lower.
    manager = StreamableHTTPSessionManager(
        app=server,
        stateless=True,
        json_response=True,
        max_request_body_size=settings.max_upload_body_bytes,
    )
    app.router.routes.append(McpEndpoint(manager, settings.mcp_allowed_origins).route)
    return manager
