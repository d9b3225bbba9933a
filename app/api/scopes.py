"""Per-scope retrieval settings (JSON, or the text of a butler.toml)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from pydantic import ValidationError

from app.api.deps import Admin, DbDep, Reader
from app.api.schemas.common import ScopeName
from app.errors import ApiError, model_error_details
from app.services.scopes import ScopeSettings, parse_butler_toml, read_scope_settings, store_scope_settings

router = APIRouter(prefix="/v1", tags=["scopes"])

# In Annotated, so FastAPI keeps ScopeName's length and pattern: as `= Path(...)` it dropped
# them and a 65-character scope was accepted here while every write refused it.
ScopePath = Annotated[
    ScopeName,
    Path(description="Scope name (usually a butler).", openapi_examples={"example": {"value": "health"}}),
]

_TOML_TYPES = ("application/toml", "text/plain", "text/x-toml")


@router.put(
    "/scopes/{scope}/settings",
    response_model=ScopeSettings,
    response_model_exclude_none=True,
    operation_id="scope_settings_put",
    summary="Set a scope's retrieval settings",
    openapi_extra={
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
    },
    responses={403: {"description": "Needs the admin role."}, 422: {"description": "Invalid settings."}},
)
async def put_settings(
    request: Request,
    db: DbDep,
    principal: Admin,
    scope: ScopePath,
) -> ScopeSettings:
    """Replace the settings of one scope: JSON, or a butler.toml text with Content-Type application/toml."""
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
    return await store_scope_settings(db, tenant_id=principal.tenant_id, scope=scope, settings=settings)


@router.get(
    "/scopes/{scope}/settings",
    response_model=ScopeSettings,
    response_model_exclude_none=True,
    operation_id="scope_settings_get",
    summary="Get a scope's retrieval settings",
)
async def get_settings(
    db: DbDep,
    principal: Reader,
    scope: ScopePath,
) -> Any:
    """The stored settings of one scope (empty object when none)."""
    return await read_scope_settings(db, tenant_id=principal.tenant_id, scope=scope)
