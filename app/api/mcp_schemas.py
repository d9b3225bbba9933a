"""Compact JSON Schemas for MCP: the REST models' schemas without what an agent pays for but never reads.

An agent receives every tool's schemas on every turn, so they are cut to the contract: no titles,
examples or `$defs` indirection, optional fields without their `null` alternative, and only the
parameters the caller can use. The models themselves (and so validation) are the REST ones.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from pydantic import BaseModel

# OpenAPI-only or display-only keywords; `discriminator` would point into the dropped `$defs`.
_DROPPED = frozenset({"title", "examples", "discriminator", "$defs"})


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """Replace every `$ref` into `$defs` by the definition it names (the models are not recursive)."""
    if isinstance(node, list):
        return [_inline(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = _inline(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
        return {**target, **{k: _inline(v, defs) for k, v in node.items() if k != "$ref"}}
    return {key: _inline(value, defs) for key, value in node.items()}


def _without_null(node: dict[str, Any]) -> dict[str, Any]:
    # `X | None = None` is how a model says "optional"; leaving a field out says the same in fewer
    # characters, and the model still accepts an explicit null.
    options = node.get("anyOf")
    if not isinstance(options, list) or {"type": "null"} not in options:
        return node
    rest = [option for option in options if option != {"type": "null"}]
    base = {k: v for k, v in node.items() if k != "anyOf" and not (k == "default" and v is None)}
    return {**rest[0], **base} if len(rest) == 1 else {**base, "anyOf": rest}


def _compact(node: Any, *, descriptions: bool, nullable: bool) -> Any:
    if isinstance(node, list):
        return [_compact(item, descriptions=descriptions, nullable=nullable) for item in node]
    if not isinstance(node, dict):
        return node
    if not nullable:
        node = _without_null(node)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED or (key == "description" and not descriptions):
            continue
        if key == "additionalProperties" and value is True:
            continue  # JSON Schema's default
        if key == "properties":
            # Property names are data here, not keywords: a field may be called `type` or `title`.
            out[key] = {
                name: _compact(schema, descriptions=descriptions, nullable=nullable)
                for name, schema in value.items()
            }
        elif key == "items":
            # An array's own description says what its items are.
            out[key] = _compact(value, descriptions=False, nullable=nullable)
        else:
            out[key] = _compact(value, descriptions=descriptions, nullable=nullable)
    return out


def input_schema(
    model: type[BaseModel], *, hidden: Collection[str] = (), hints: dict[str, str] | None = None
) -> dict[str, Any]:
    """The tool's arguments: `model`'s schema, compacted, without `hidden`, with `hints` as descriptions."""
    full = model.model_json_schema()
    schema: dict[str, Any] = _compact(_inline(full, full.get("$defs", {})), descriptions=True, nullable=False)
    properties = {name: spec for name, spec in schema.get("properties", {}).items() if name not in hidden}
    for name, text in (hints or {}).items():
        properties[name] = {**properties[name], "description": text}
    schema["properties"] = properties
    # The root's description is the model's docstring; the tool's own description says it better.
    schema.pop("description", None)
    required = [name for name in schema.get("required", []) if name in properties]
    if required:
        schema["required"] = required
    else:
        schema.pop("required", None)
    return schema


# A result schema says what comes back; how it was validated is the server's business.
_OUTPUT_KEYWORDS = frozenset({"type", "properties", "items"})
# Levels of properties described: the result's fields, and the fields of the items it lists.
_OUTPUT_DEPTH = 2


def _shape(node: Any, depth: int = 0) -> Any:
    """Only the types of a result schema; `X | None` becomes `type: [X, "null"]` (or any value).

    Objects nested in an item (a search hit's `context`, a reranker report) keep only their type.
    """
    if isinstance(node, list):
        return [_shape(item, depth) for item in node]
    if not isinstance(node, dict):
        return node
    options = node.get("anyOf")
    if isinstance(options, list):
        rest = [option for option in options if option != {"type": "null"}]
        if len(rest) == 1 and isinstance(rest[0].get("type"), str) and len(rest) < len(options):
            return {**_shape(rest[0], depth), "type": [rest[0]["type"], "null"]}
        return {}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties" and depth < _OUTPUT_DEPTH:
            out[key] = {name: _shape(schema, depth + 1) for name, schema in value.items()}
        elif key in _OUTPUT_KEYWORDS - {"properties"} and (key != "items" or depth < _OUTPUT_DEPTH):
            out[key] = _shape(value, depth)
    return out


def output_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The tool's result: the types of `model`'s serialisation schema (clients validate results by it)."""
    full = model.model_json_schema(mode="serialization")
    shape: dict[str, Any] = _shape(_inline(full, full.get("$defs", {})))
    return shape
