"""Per-scope retrieval settings (JSON, or the text of a butler.toml)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Request
from pydantic import ValidationError

from app.api.operation import Mcp, Operation, Rest, routes
from app.api.schemas.common import ScopeName
from app.api.schemas.parameters import ScopeIn, ScopeSettingsIn
from app.auth import Principal
from app.errors import ApiError, model_error_details
from app.infra.db import Database
from app.services.scopes import ScopeSettings, parse_butler_toml, read_scope_settings, store_scope_settings
from app.state import ServiceState

# In Annotated, so FastAPI keeps ScopeName's length and pattern: as `= Path(...)` it dropped
# them and a 65-character scope was accepted here while every write refused it.
ScopePath = Annotated[
    ScopeName,
    Path(description="Scope name (usually a butler).", openapi_examples={"example": {"value": "health"}}),
]

_TOML_TYPES = ("application/toml", "text/plain", "text/x-toml")
_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/ScopeSettings"}},
            "application/toml": {
                "schema": {"type": "string"},
                "example": '[butler]\nname = "health"\n\n[butler.memory.retrieval]\n'
                "score_weights = { relevance = 0.6, importance = 0.1, recency = 0.2, confidence = 0.1 }\n",
            },
        },
    }
}


async def _scope(scope: ScopePath) -> ScopeIn:
    return ScopeIn.model_construct(scope=scope)


async def _settings(request: Request, scope: ScopePath) -> ScopeSettingsIn:
    # The body is JSON or butler.toml text, so it is read here rather than declared as a model.
    raw = await request.body()
    if not raw.strip():
        # PUT replaces: an empty body used to store empty settings, wiping the scope's.
        raise ApiError(
            422,
            "validation_error",
            "send the scope's settings as a JSON object ({} clears them) or as butler.toml text",
        )
    content_type = request.headers.get("content-type", "application/json").split(";")[0].strip()
    if content_type in _TOML_TYPES:
        name, settings = parse_butler_toml(raw.decode("utf-8", errors="replace"))
        if name is not None and name != scope:
            raise ApiError(422, "validation_error", f"butler.toml names butler {name!r}, not scope {scope!r}")
    else:
        try:
            settings = ScopeSettings.model_validate_json(raw)
        except ValidationError as exc:
            raise ApiError(
                422, "validation_error", "invalid scope settings", model_error_details(exc)
            ) from exc
    return ScopeSettingsIn.model_construct(scope=scope, settings=settings)


async def _put(state: ServiceState, db: Database, who: Principal, args: ScopeSettingsIn) -> Any:
    return await store_scope_settings(db, tenant_id=who.tenant_id, scope=args.scope, settings=args.settings)


async def _get(state: ServiceState, db: Database, who: Principal, args: ScopeIn) -> Any:
    return await read_scope_settings(db, tenant_id=who.tenant_id, scope=args.scope)


OPERATIONS = (
    Operation(
        "scope_settings_put",
        "admin",
        ScopeSettingsIn,
        ScopeSettings,
        _put,
        Rest(
            "PUT",
            "/scopes/{scope}/settings",
            "Set a scope's retrieval settings",
            "Replace the settings of one scope: JSON, or a butler.toml text with Content-Type "
            "application/toml.",
            params=_settings,
            responses={
                403: {"description": "Needs the admin role."},
                422: {"description": "Invalid settings."},
            },
            route_options={"openapi_extra": _BODY},
        ),
        Mcp(
            "Replace a scope's retrieval settings (recall weights, fusion, half-lives, reranking).",
            "scopes",
            "replace",
        ),
        exclude_none=True,
    ),
    Operation(
        "scope_settings_get",
        "reader",
        ScopeIn,
        ScopeSettings,
        _get,
        Rest(
            "GET",
            "/scopes/{scope}/settings",
            "Get a scope's retrieval settings",
            "The stored settings of one scope (empty object when none).",
            params=_scope,
        ),
        Mcp("A scope's retrieval settings.", "scopes", "read"),
        exclude_none=True,
    ),
)

router = routes(OPERATIONS, prefix="/v1", tags=["scopes"])
