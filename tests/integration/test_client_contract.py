"""recalld-client stays in step with the server's OpenAPI document: operations, arguments and models.

When one of these fails, the server changed an operation or a schema: change the client to match
(clients/python/src/recalld_client: `_core.OPERATIONS`, the methods of Client and AsyncClient, and
`models`), as each message says.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import recalld_client.models as client_models
from app.main import create_app
from recalld_client import AsyncClient, Client
from recalld_client._core import OPERATIONS

CLIENT_SRC = Path(__file__).resolve().parents[2] / "clients" / "python" / "src"
# Query parameters whose names are Python keywords.
PYTHON_NAMES = {"from": "from_line"}
# Operations whose body is not one model's fields: the method's own arguments.
BODY_ARGUMENTS = {"memory_store_batch": {"items"}, "scope_settings_put": {"settings"}}
# Answers documented by an example only (no schema): the client's model of each.
EXAMPLE_MODELS: dict[str, type[BaseModel]] = {
    "code_index_files": client_models.CodeIndexOut,
    "code_list_files": client_models.CodeFileList,
    "code_research": client_models.ResearchOut,
}


@cache
def openapi() -> dict[str, Any]:
    doc: dict[str, Any] = create_app().openapi()
    return doc


def _operations() -> dict[str, dict[str, Any]]:
    out = {}
    for path, item in openapi()["paths"].items():
        for method, operation in item.items():
            if path != "/mcp":  # MCP is its own protocol (JSON-RPC), not an operation of the client
                out[operation["operationId"]] = {"method": method.upper(), "path": path, **operation}
    return out


def _ref_name(schema: dict[str, Any]) -> str | None:
    ref = schema.get("$ref")
    return ref.rsplit("/", 1)[-1] if isinstance(ref, str) else None


def _shape(schema: dict[str, Any]) -> Any:
    """A schema reduced to its type structure: no descriptions, limits or examples."""
    if (name := _ref_name(schema)) is not None:
        return ("ref", name)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return ("union", frozenset(_shape(s) for s in schema[key]))
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return _shape(schema["allOf"][0])
    if "const" in schema:
        return ("const", schema["const"])
    if "enum" in schema:
        return ("enum", tuple(sorted(schema["enum"])))
    kind = schema.get("type")
    if kind == "array":
        if "prefixItems" in schema:
            return ("tuple", tuple(_shape(s) for s in schema["prefixItems"]))
        return ("array", _shape(schema.get("items", {})))
    if kind == "object":
        extra = schema.get("additionalProperties")
        return ("object", _shape(extra) if isinstance(extra, dict) else None)
    if kind == "string":
        return ("string", schema.get("format"))
    return (kind or "any",)


def _client_model(name: str) -> type[BaseModel]:
    model = getattr(client_models, name, None)
    assert isinstance(model, type) and issubclass(model, BaseModel), (
        f"the server's schema {name} has no model recalld_client.models.{name}"
    )
    return model


def _referenced(schema: Any, found: set[str]) -> None:
    """Names of every component `schema` refers to, transitively."""
    if isinstance(schema, dict):
        name = _ref_name(schema)
        if name is not None and name not in found:
            found.add(name)
            _referenced(openapi()["components"]["schemas"][name], found)
        for value in schema.values():
            _referenced(value, found)
    elif isinstance(schema, list):
        for value in schema:
            _referenced(value, found)


def _request_schemas() -> set[str]:
    found: set[str] = set()
    for operation in _operations().values():
        _referenced(operation.get("requestBody", {}), found)
    return found


def test_every_operation_has_a_method_on_both_clients() -> None:
    server = {op_id: (op["method"], op["path"]) for op_id, op in _operations().items()}
    assert server == OPERATIONS, "recalld_client._core.OPERATIONS differs from the OpenAPI document"
    for op_id in server:
        sync, coroutine = getattr(Client, op_id, None), getattr(AsyncClient, op_id, None)
        assert callable(sync), f"Client has no method {op_id}"
        assert inspect.iscoroutinefunction(coroutine), f"AsyncClient.{op_id} is not a coroutine method"
        assert inspect.signature(coroutine).parameters == inspect.signature(sync).parameters, op_id


def _expected_arguments(operation: dict[str, Any]) -> tuple[set[str], set[str]]:
    """Names and required names a method takes: path and query parameters, then the body's fields."""
    names, required = set(), set()
    for parameter in operation.get("parameters", []):
        name = PYTHON_NAMES.get(parameter["name"], parameter["name"])
        names.add(name)
        if parameter.get("required"):
            required.add(name)
    if operation["operationId"] in BODY_ARGUMENTS:
        body_names = BODY_ARGUMENTS[operation["operationId"]]
        return names | body_names, required | body_names
    content = operation.get("requestBody", {}).get("content", {})
    name = _ref_name(content.get("application/json", {}).get("schema", {}))
    if name is not None:
        schema = openapi()["components"]["schemas"][name]
        names |= set(schema["properties"])
        required |= set(schema.get("required", []))
    return names, required


@pytest.mark.parametrize("op_id", sorted(OPERATIONS))
def test_each_method_takes_the_operations_arguments(op_id: str) -> None:
    names, required = _expected_arguments(_operations()[op_id])
    parameters = list(inspect.signature(getattr(Client, op_id)).parameters.values())[1:]
    assert {p.name for p in parameters} == names, f"Client.{op_id}: arguments differ from the operation"
    without_default = {p.name for p in parameters if p.default is inspect.Parameter.empty}
    assert without_default == required, f"Client.{op_id}: required arguments differ from the operation"


@pytest.mark.parametrize("name", sorted(openapi()["components"]["schemas"]))
def test_each_schema_has_a_client_model_of_the_same_shape(name: str) -> None:
    server = openapi()["components"]["schemas"][name]
    model = _client_model(name)
    is_request = name in _request_schemas()
    client = model.model_json_schema(
        ref_template="#/components/schemas/{model}", mode="validation" if is_request else "serialization"
    )
    server_props, client_props = server.get("properties", {}), client.get("properties", {})
    server_required, client_required = set(server.get("required", [])), set(client.get("required", []))
    missing = set(server_props) - set(client_props)
    assert not missing, f"recalld_client.models.{name} lacks the server's fields {sorted(missing)}"
    unknown = set(client_props) - set(server_props)
    if is_request:
        # The server refuses unknown fields, so a request model has exactly the server's.
        assert not unknown, f"recalld_client.models.{name} has fields the server refuses: {sorted(unknown)}"
    else:
        # Responses may name fields the schema leaves to additionalProperties, never as required.
        assert not unknown & client_required, f"{name}: fields {sorted(unknown & client_required)}"
    # The client may default what is a constant on the server (a batch item's `type`).
    defaulted = {f for f in server_required - client_required if "const" in server_props[f]}
    assert client_required == server_required - defaulted, f"{name}: required fields differ"
    for field, schema in server_props.items():
        assert _shape(client_props[field]) == _shape(schema), f"{name}.{field}: type differs"
        if is_request and field not in defaulted:
            assert client_props[field].get("default") == schema.get("default"), f"{name}.{field}: default"


@pytest.mark.parametrize("op_id", sorted(EXAMPLE_MODELS))
def test_answers_documented_by_example_fit_their_client_model(op_id: str) -> None:
    model = EXAMPLE_MODELS[op_id]
    response = _operations()[op_id]["responses"]["200"]["content"]["application/json"]
    example = response["example"]
    parsed = model.model_validate(example)
    assert set(example) <= set(type(parsed).model_fields), f"{model.__name__} lacks fields of {op_id}"
    required = {n for n, f in model.model_fields.items() if f.is_required()}
    assert required <= set(example), f"{model.__name__} requires fields {op_id} does not answer"


def test_the_client_and_its_retrievers_import_no_server_code_and_no_torch(tmp_path: Path) -> None:
    script = (
        "import sys, recalld_client, recalld_client.langchain, recalld_client.llama_index\n"
        "heavy = {'app', 'torch', 'fastapi', 'sentence_transformers', 'asyncpg'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(CLIENT_SRC)}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
