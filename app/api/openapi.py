"""The OpenAPI document behind /docs, showing the error shape the handlers really send."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.api.mcp import MCP_PATH, OPENAPI_PATH_ITEM
from app.api.schemas.errors import ErrorOut

_ERROR_REF = {"$ref": "#/components/schemas/ErrorOut"}
# FastAPI documents its own 422 body ({"detail": [...]}); app.errors never sends that shape.
_FASTAPI_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")
# The scheme behind the docs page's "Authorize" button: the key is sent as a bearer token.
API_KEY_SCHEME = "apiKey"
_API_KEY_SECURITY_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "description": "A recalld API key (`rk_…`), sent as `Authorization: Bearer <key>`.",
}

# What any keyed operation may answer besides its own codes, and what a client should do about it.
_COMMON_ERRORS = {
    "400": "The body could not be parsed (e.g. JSON nested past what the parser takes); do not retry.",
    "401": "Missing, unknown or revoked API key.",
    "403": "The key's role does not allow this operation (or the Origin may not call /mcp).",
    "404": "No such memory, file or tenant here (ids of other tenants look the same).",
    "413": "Body over the operation's size cap (before auth), or the tenant's storage quota reached "
    "(`quota_exceeded`); do not retry unchanged.",
    "415": "The body is not `Content-Type: application/json`.",
    "422": "Invalid request (a field over its length limit too); `error.details` lists each problem.",
    "429": "This key is over its rate limit; retry after the `Retry-After` seconds.",
    "503": "The database is unavailable for a moment; retry after the `Retry-After` seconds.",
}
_IDEMPOTENT_WRITES = frozenset(
    {"memory_store_fact", "memory_store_rule", "memory_store_episode", "memory_store_batch"}
)
_CONFLICT = {"409": "The idempotency_key was already used for a different write (`idempotency_conflict`)."}


def install_openapi(app: FastAPI) -> None:
    """Make app.openapi() document `{"error": {...}}` on every 4xx/5xx, the key and the common errors on keyed routes."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            doc["paths"][MCP_PATH] = OPENAPI_PATH_ITEM
            app.openapi_schema = with_error_shape(doc)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def with_error_shape(doc: dict[str, Any]) -> dict[str, Any]:
    """The document with ErrorOut as every 4xx/5xx body, and the key and common status codes on keyed routes."""
    components: dict[str, Any] = doc.setdefault("components", {})
    components.setdefault("securitySchemes", {})[API_KEY_SCHEME] = _API_KEY_SECURITY_SCHEME
    schemas: dict[str, Any] = components.setdefault("schemas", {})
    for name in _FASTAPI_VALIDATION_SCHEMAS:
        schemas.pop(name, None)
    error_schema = ErrorOut.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(error_schema.pop("$defs", {}))
    schemas["ErrorOut"] = error_schema
    for path, operations in doc["paths"].items():
        keyed = path.startswith("/v1/") or path == MCP_PATH
        for operation in operations.values():
            responses: dict[str, Any] = operation.setdefault("responses", {})
            if keyed:
                operation["security"] = [{API_KEY_SCHEME: []}]
                writes = operation.get("operationId") in _IDEMPOTENT_WRITES
                for status, description in (_COMMON_ERRORS | (_CONFLICT if writes else {})).items():
                    responses.setdefault(status, {"description": description})
            if responses.get("422", {}).get("description") == "Validation Error":
                responses["422"]["description"] = "Invalid request; `error.details` lists each problem."
            for status, response in responses.items():
                if status.startswith(("4", "5")):
                    response["content"] = {"application/json": {"schema": _ERROR_REF}}
    return doc
