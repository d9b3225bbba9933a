"""What people and scrapers see besides the memory API: /docs, /metrics, error bodies (R-I1, R-I4, R-I5)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.infra.config import Settings
from app.main import create_app
from app.state import ServiceState
from tests.support import TenantFactory, TenantKeys

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
    # Every reference resolves inside the document (a model's own '#/$defs/...' would not).
    refs = set(re.findall(r'"\$ref": "([^"]+)"', json.dumps(doc)))
    assert {ref for ref in refs if ref.removeprefix("#/components/schemas/") not in schemas} == set()


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


async def test_oversized_input_is_rejected_with_a_clear_message(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    reader = tenant.headers("reader")
    long_topic = await client.post("/v1/recall", json={"topic": "y" * 4001}, headers=reader)
    assert long_topic.status_code == 422
    assert long_topic.json()["error"]["code"] == "validation_error"
    assert long_topic.json()["error"]["message"] == "topic: String should have at most 4000 characters"
    for path, body in (
        ("/v1/search", {"query": "x", "max_results": 101}),
        ("/v1/recall", {"topic": "x", "limit": 101}),
        ("/v1/recall", {"topic": "x", "max_results": 101}),
    ):
        response = await client.post(path, json=body, headers=reader)
        assert response.status_code == 422, (path, body)
        assert response.json()["error"]["message"].endswith("Input should be less than or equal to 100")
    alias = await client.post("/v1/recall", json={"topic": "x", "max_results": 3}, headers=reader)
    assert alias.status_code == 200


async def test_malformed_json_gets_a_readable_422(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    response = await client.post(
        "/v1/facts",
        content=b'{"content": ',
        headers={**tenant.headers(), "Content-Type": "application/json"},
    )
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["message"] == "request body is not valid JSON: Expecting value at character 12"


async def test_json_body_without_json_content_type_says_so(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    # What `curl -d '{...}'` sends when the Content-Type header is forgotten.
    response = await client.post(
        "/v1/facts",
        content=b'{"content": "forgotten header"}',
        headers={**tenant.headers(), "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"
    assert response.json()["error"]["message"] == (
        "send the body as JSON with 'Content-Type: application/json' (got 'application/x-www-form-urlencoded')"
    )
    found = await client.post("/v1/search", json={"query": "forgotten header"}, headers=tenant.headers())
    assert found.json()["results"] == []


async def test_bad_scope_settings_are_422_and_change_nothing(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    admin = tenant.headers("admin")
    good = await client.put("/v1/scopes/health/settings", json={"half_life_days": 10}, headers=admin)
    assert good.status_code == 200
    toml_date = '[butler]\nname = "health"\n[butler.memory.retrieval]\nhalf_life_days = 1979-05-27\n'
    for content, media_type, message in (
        (b"x", "application/json", "invalid scope settings"),
        (b"x", "text/x-www-form-urlencoded", "invalid scope settings"),
        (toml_date.encode(), "application/toml", "invalid [butler.memory.retrieval] settings"),
    ):
        response = await client.put(
            "/v1/scopes/health/settings", content=content, headers={**admin, "Content-Type": media_type}
        )
        assert response.status_code == 422, (content, media_type, response.text)
        assert response.json()["error"]["message"] == message
        assert response.json()["error"]["details"][0]["type"] in {"json_invalid", "float_type"}
    kept = await client.get("/v1/scopes/health/settings", headers=admin)
    assert kept.json() == {"half_life_days": 10.0}


async def test_nul_characters_and_impossible_dates_are_422_not_500(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    writer = tenant.headers()
    cases: list[tuple[str, str, dict[str, Any], str]] = [
        ("POST", "/v1/facts", {"content": "a\x00b"}, "content contains a NUL character"),
        ("POST", "/v1/facts", {"content": "x", "metadata": {"k": ["\x00"]}}, "metadata.k.0 contains a NUL"),
        (
            "POST",
            "/v1/memories:batch",
            {"items": [{"type": "fact", "content": "fine"}, {"type": "rule", "content": "\x00"}]},
            "items.1.content contains a NUL",
        ),
        ("POST", "/v1/search", {"query": "x\x00"}, "query contains a NUL"),
        ("PUT", "/v1/documents", {"path": "MEMORY.md", "content": "\x00"}, "content contains a NUL"),
        ("POST", "/v1/facts", {"content": "x", "created_at": "0001-01-01T00:00:00Z"}, "between the years"),
        ("POST", "/v1/search", {"query": "x", "filters": {"created_after": "0001-01-01T00:00:00Z"}}, "years"),
        # A clock ahead of now makes confidence grow exponentially (and overflow in SQL).
        ("POST", "/v1/facts", {"content": "x", "created_at": "2500-01-01T00:00:00Z"}, "in the future"),
        ("POST", "/v1/rules", {"content": "x", "last_confirmed_at": "2500-01-01T00:00:00Z"}, "in the future"),
    ]
    for method, path, body, message in cases:
        response = await client.request(method, path, json=body, headers=writer)
        assert response.status_code == 422, (path, body, response.text)
        assert message in response.json()["error"]["message"], response.text
    for url in ("/v1/code/files?repository=a%00b", "/v1/documents?path=a%00.md"):
        response = await client.get(url, headers=writer)
        assert response.status_code == 422, url
        assert response.json()["error"]["code"] == "validation_error"
    found = await client.post("/v1/search", json={"query": "fine", "min_score": 0}, headers=writer)
    assert found.json()["results"] == []
    naive = await client.post(
        "/v1/facts", json={"content": "x", "created_at": "2020-01-01T10:00:00"}, headers=writer
    )
    assert naive.json()["created_at"] == "2020-01-01T10:00:00Z"


async def test_unexpected_errors_are_500_without_internals(settings: Settings) -> None:
    app: FastAPI = create_app(settings)

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("secret table name memory_internal_7")

    # No lifespan needed: the route touches nothing. The ASGI transport must not re-raise.
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://recalld.test") as http:
        response = await http.get("/boom")
    assert response.status_code == 500
    assert response.json() == {
        "error": {"code": "internal_error", "message": "internal server error", "details": None}
    }
    assert "secret" not in response.text and "Traceback" not in response.text


async def test_search_and_recall_bodies_are_exactly_their_documented_models(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    """The retrieval routes skip response-model validation for speed: the bodies must still match it."""
    from app.api.schemas.recall import RecallOut
    from app.api.schemas.retrieval import SearchOut

    tenant = await make_tenant()
    other = await make_tenant(operator=True)
    fixture = Path(__file__).parent / "fixtures" / "swift-auth"
    files = [
        {"path": p.relative_to(fixture).as_posix(), "content": p.read_text()}
        for p in fixture.rglob("*.swift")
    ]
    assert (
        await client.put(
            "/v1/code/files", json={"repository": "app", "files": files}, headers=tenant.headers()
        )
    ).status_code == 200
    for t in (tenant, other):
        stored = await client.post(
            "/v1/facts", json={"content": "The boat is moored in Porto", "importance": 6}, headers=t.headers()
        )
        assert stored.status_code == 201
    requests: list[tuple[str, dict[str, Any], TenantKeys]] = [
        ("/v1/search", {"query": "boat in Porto"}, tenant),
        ("/v1/search", {"query": "boat in Porto", "rerank": True, "diversity": 0.5}, tenant),
        ("/v1/search", {"query": "boat", "mode": "keyword", "min_score": 0}, tenant),
        ("/v1/search", {"query": "", "symbol": "login", "types": ["code"], "depth": 2}, tenant),
        ("/v1/search", {"query": "boat", "tenants": [tenant.name, other.name]}, other),
        ("/v1/recall", {"topic": "where is the boat"}, tenant),
    ]
    for path, body, who in requests:
        response = await client.post(
            path, json=body, headers=who.headers("reader" if who is tenant else "admin")
        )
        assert response.status_code == 200, response.text
        served = response.json()
        assert served["results"], (path, body)
        model = SearchOut if path == "/v1/search" else RecallOut
        assert model.model_validate(served).model_dump(mode="json") == served, (path, body)


async def test_search_and_recall_report_their_phases_in_server_timing(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    service: ServiceState,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """recalld bench reads these: every phase that costs time is named, and total covers them."""
    monkeypatch.setattr(service.settings, "server_timing", True)
    tenant = await make_tenant()
    stored = await client.post(
        "/v1/facts", json={"content": "The kayak is stored in Lisbon"}, headers=tenant.headers()
    )
    assert stored.status_code == 201
    for path, body in (
        ("/v1/search", {"query": "kayak in Lisbon"}),
        ("/v1/recall", {"topic": "kayak in Lisbon"}),
    ):
        response = await client.post(path, json=body, headers=tenant.headers())
        assert response.status_code == 200
        phases = {
            name: float(duration)
            for name, _, duration in (
                part.strip().partition(";dur=") for part in response.headers["server-timing"].split(",")
            )
        }
        assert {"embed", "keyword", "semantic", "fuse", "fetch", "total"} <= set(phases), (path, phases)
        assert phases["total"] >= phases["keyword"] + phases["semantic"] + phases["fetch"], (path, phases)
