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


def install_openapi(app: FastAPI) -> None:
    """Make app.openapi() document `{"error": {...}}` on every 4xx, and the key and 401 on keyed routes."""

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
    """The document with ErrorOut as the body of every 4xx response, and the key on keyed routes."""
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
                responses.setdefault("401", {"description": "Missing, unknown or revoked API key."})
            if responses.get("422", {}).get("description") == "Validation Error":
                responses["422"]["description"] = "Invalid request; `error.details` lists each problem."
            for status, response in responses.items():
                if status.startswith("4"):
                    response["content"] = {"application/json": {"schema": _ERROR_REF}}
    return doc
