"""An MCP tool: what it runs, what it lists (toolsets, parameters) and how it is annotated."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import mcp_types as types
from pydantic import BaseModel

from app.api.mcp_schemas import input_schema, output_schema
from app.auth import Principal, Role
from app.errors import ApiError
from app.infra.db import Database
from app.state import ServiceState

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
