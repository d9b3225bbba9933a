"""One operation, two faces: the REST route and the MCP tool are both built from an `Operation`.

An operation names its role, its input model, its output model and the service call (`run`) once.
`routes()` turns a table of operations into a FastAPI router; `app.api.mcp_tools` turns the same
table into MCP tools. The REST side only adds how HTTP carries the input (`Rest.params`, default:
the JSON body) and how it answers (status code, extra OpenAPI documentation).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel

from app.api.deps import DbDep, StateDep, require_role
from app.api.mcp_tool import Effect, Gate, Run, Tool, Toolset
from app.auth import Principal, Role
from app.infra.db import Database
from app.services.timings import Timings
from app.state import ServiceState

Responses = dict[int | str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Timed:
    """A result with the request's phase timings (search and recall): REST sends them as Server-Timing."""

    body: dict[str, Any]
    timings: Timings


@dataclass(frozen=True, slots=True)
class Rest:
    """How HTTP carries an operation: method, path, and what differs from 'JSON body in, model out'."""

    method: Literal["GET", "POST", "PUT", "DELETE"]
    path: str
    summary: str
    # The OpenAPI description of the route (the MCP tool has its own, shorter one).
    description: str
    status_code: int = 200
    responses: Responses = field(default_factory=dict)
    # A dependency that builds the input from path and query parameters; None: the input is the body.
    # It uses model_construct: FastAPI already checked each parameter as the REST API documents it,
    # and REST answers stay what they were where a tool argument's rule is stricter (a repository name).
    params: Callable[..., Any] | None = None
    # The OpenAPI response model when it is not the output model (code routes answer plain objects).
    response_model: Any = "output"
    # The status of a 2xx answer that depends on the result (a duplicate write answers 200, not 201).
    status_of: Callable[[Any], int] | None = None
    # How a result becomes the response when it is not validated against the model (search, recall).
    render: Callable[[ServiceState, Any], Response] | None = None
    route_options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Mcp:
    """How an operation is listed as an MCP tool."""

    description: str
    toolset: Toolset
    effect: Effect
    gated: Mapping[str, Gate] = field(default_factory=dict)
    hints: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Operation:
    """A REST route and an MCP tool of the same name, running the same service call."""

    name: str
    role: Role
    input: type[BaseModel]
    output: type[BaseModel]
    run: Run
    rest: Rest
    # None: REST only.
    mcp: Mcp | None = None
    # Like the REST route's response_model_exclude_none (scope settings leave unset fields out).
    exclude_none: bool = False

    def tool(self) -> Tool:
        """This operation as an MCP tool."""
        if self.mcp is None:
            raise ValueError(f"{self.name} is not an MCP tool")
        return Tool(
            name=self.name,
            description=self.mcp.description,
            arguments=self.input,
            role=self.role,
            run=partial(_untimed, self.run),
            output=self.output,
            toolset=self.mcp.toolset,
            effect=self.mcp.effect,
            gated=self.mcp.gated,
            hints=self.mcp.hints,
            exclude_none=self.exclude_none,
        )


async def _untimed(run: Run, state: ServiceState, db: Database, who: Principal, args: Any) -> Any:
    # A tool result is the body alone: MCP has no Server-Timing.
    result = await run(state, db, who, args)
    return result.body if isinstance(result, Timed) else result


def _endpoint(operation: Operation) -> Callable[..., Awaitable[Any]]:
    rest = operation.rest

    async def endpoint(
        args: BaseModel, state: ServiceState, db: Database, principal: Principal, response: Response
    ) -> Any:
        result = await operation.run(state, db, principal, args)
        if rest.status_code == 204:
            return Response(status_code=204)
        if rest.render is not None:
            return rest.render(state, result)
        if rest.status_of is not None:
            response.status_code = rest.status_of(result)
        return result

    # FastAPI reads the parameters from the signature: the state, the database, the caller with its
    # role (checked first: a bad key answers 401 before any 422), then the input (the body, or built
    # from path and query parameters by `params`).
    source = operation.input if rest.params is None else Annotated[operation.input, Depends(rest.params)]
    keyword = inspect.Parameter.KEYWORD_ONLY
    endpoint.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("state", keyword, annotation=StateDep),
            inspect.Parameter("db", keyword, annotation=DbDep),
            inspect.Parameter(
                "principal", keyword, annotation=Annotated[Principal, Depends(require_role(operation.role))]
            ),
            inspect.Parameter("args", keyword, annotation=source),
            inspect.Parameter("response", keyword, annotation=Response),
        ]
    )
    return endpoint


def routes(operations: Sequence[Operation], **router_options: Any) -> APIRouter:
    """A router with one route per operation, in table order."""
    router = APIRouter(**router_options)
    for operation in operations:
        rest = operation.rest
        model = operation.output if rest.response_model == "output" else rest.response_model
        options: dict[str, Any] = {
            "response_model_exclude_none": operation.exclude_none,
            **rest.route_options,
        }
        router.add_api_route(
            rest.path,
            _endpoint(operation),
            methods=[rest.method],
            status_code=rest.status_code,
            response_model=None if rest.status_code == 204 else model,
            operation_id=operation.name,
            summary=rest.summary,
            description=rest.description,
            responses=rest.responses or None,
            **options,
        )
    return router
