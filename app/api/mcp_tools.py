"""The MCP tools: every operation of the table that is a tool, in the table's order."""

from __future__ import annotations

from functools import lru_cache

import mcp_types as types

from app.api import code, documents, memories, scopes, search
from app.api.mcp_tool import OPERATOR, Gate, Tool, Toolset
from app.auth import Principal

TOOLS: dict[str, Tool] = {
    operation.name: operation.tool()
    for table in (search, memories, scopes, documents, code)
    for operation in table.OPERATIONS
    if operation.mcp is not None
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
