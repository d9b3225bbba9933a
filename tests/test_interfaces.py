"""What people and scrapers see besides the memory API: /docs, /metrics, error bodies (R-I1, R-I4, R-I5)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import TenantFactory

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


async def test_metrics_report_routes_search_legs_embedding_and_pool(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    stored = await client.post(
        "/v1/facts", json={"content": "The meter is read on the first Monday"}, headers=tenant.headers()
    )
    assert stored.status_code == 201
    found = await client.post(
        "/v1/search", json={"query": "when is the meter read"}, headers=tenant.headers("reader")
    )
    assert found.status_code == 200
    metrics = await client.get("/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    lines = metrics.text.splitlines()

    def has(prefix: str, *labels: str) -> bool:
        return any(line.startswith(prefix) and all(label in line for label in labels) for line in lines)

    assert has("recalld_request_seconds_bucket", 'route="/v1/search"', 'method="POST"', 'status="200"')
    assert has("recalld_request_seconds_count", 'route="/v1/facts"', 'status="201"')
    assert has("recalld_search_leg_seconds_count", 'leg="semantic"')
    assert has("recalld_search_leg_seconds_count", 'leg="keyword"')
    assert has("recalld_embedding_seconds_count", 'kind="query"')
    assert has("recalld_embedding_seconds_count", 'kind="document"')
    assert has("recalld_pool_connections", 'state="in_use"')
    assert has("recalld_pool_connections", 'state="total"')
