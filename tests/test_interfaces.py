"""What people and scrapers see besides the memory API: /docs, /metrics, error bodies (R-I1, R-I4, R-I5)."""

from __future__ import annotations

from typing import Any

import httpx

SPEC_OPERATION_IDS = {
    "memory_search",
    "memory_recall",
    "memory_get",
    "memory_store_fact",
    "memory_store_rule",
    "memory_store_episode",
    "memory_store_batch",
    "memory_confirm",
    "memory_forget",
    "code_research",
}


def _has_example(content: dict[str, Any], schemas: dict[str, Any]) -> bool:
    if "example" in content or "examples" in content:
        return True
    ref = content.get("schema", {}).get("$ref", "")
    return "examples" in schemas.get(ref.rsplit("/", 1)[-1], {})


async def test_docs_describe_every_field_and_show_examples_on_every_endpoint(
    client: httpx.AsyncClient,
) -> None:
    page = await client.get("/docs")
    assert page.status_code == 200 and "swagger-ui" in page.text
    doc = (await client.get("/openapi.json")).json()
    schemas: dict[str, Any] = doc["components"]["schemas"]
    undescribed = [
        f"{name}.{field}"
        for name, schema in schemas.items()
        for field, prop in schema.get("properties", {}).items()
        if "description" not in prop
    ]
    assert undescribed == []
    missing: list[str] = []
    operation_ids = set()
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            where = f"{method.upper()} {path}"
            operation_ids.add(operation["operationId"])
            for media, content in operation.get("requestBody", {}).get("content", {}).items():
                if not _has_example(content, schemas):
                    missing.append(f"{where} request {media}")
            for parameter in operation.get("parameters", []):
                if "description" not in parameter or "examples" not in parameter:
                    missing.append(f"{where} parameter {parameter['name']}")
            for status, response in operation["responses"].items():
                for media, content in response.get("content", {}).items():
                    if status.startswith("2") and not _has_example(content, schemas):
                        missing.append(f"{where} {status} {media}")
                    if status.startswith("4"):
                        # The documented error body is the one the handlers send.
                        assert content["schema"] == {"$ref": "#/components/schemas/ErrorOut"}, where
            if path.startswith("/v1/"):
                assert "401" in operation["responses"], where
    assert missing == []
    assert operation_ids >= SPEC_OPERATION_IDS
    assert "HTTPValidationError" not in schemas
