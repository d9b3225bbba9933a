"""The edges of the HTTP surface answer clear JSON errors: media types, methods, scopes, paths, lengths."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support import TenantFactory

MCP_CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {"name": "memory_store_fact", "arguments": {"content": "sent without a media type"}},
}


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
async def test_mcp_without_a_json_content_type_is_a_json_415(
    client: httpx.AsyncClient, make_tenant: TenantFactory, content_type: str | None
) -> None:
    """The SDK answered a plain-text 400 quoting its own validation text."""
    tenant = await make_tenant()
    headers = {**tenant.headers(), "Accept": "application/json, text/event-stream"}
    if content_type:
        headers["Content-Type"] = content_type
    response = await client.post("/mcp", content=json.dumps(MCP_CALL).encode(), headers=headers)
    assert response.status_code == 415, response.text
    assert response.json()["error"]["code"] == "unsupported_media_type"
    assert "application/json" in response.json()["error"]["message"]
    found = await client.post(
        "/v1/search", json={"query": "media type", "mode": "keyword"}, headers=tenant.headers("reader")
    )
    assert found.json()["results"] == []


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("POST", "/v1/documents", {"GET", "PUT", "DELETE"}),
        ("PATCH", "/v1/memories/5a4744e1-b384-42ad-b3e8-ea224528b272", {"GET", "DELETE"}),
        ("GET", "/v1/facts", {"POST"}),
        ("POST", "/v1/code/files", {"GET", "PUT", "DELETE"}),
        ("DELETE", "/v1/scopes/health/settings", {"GET", "PUT"}),
    ],
)
async def test_a_405_lists_every_allowed_method(
    client: httpx.AsyncClient, make_tenant: TenantFactory, method: str, path: str, allowed: set[str]
) -> None:
    tenant = await make_tenant()
    response = await client.request(method, path, headers=tenant.headers("admin"))
    assert response.status_code == 405, response.text
    assert response.json()["error"]["code"] == "method_not_allowed"
    listed = {m.strip() for m in response.headers["allow"].split(",")}
    assert allowed <= listed, listed


async def test_the_settings_endpoint_takes_the_scope_rule_of_writes(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    longest = "s" * 64
    assert (
        await client.put(f"/v1/scopes/{longest}/settings", json={}, headers=tenant.headers("admin"))
    ).status_code == 200
    for scope in ("s" * 65, "-leading-dash", "sp ace"):
        put = await client.put(f"/v1/scopes/{scope}/settings", json={}, headers=tenant.headers("admin"))
        assert put.status_code == 422, (scope, put.text)
        fact = await client.post("/v1/facts", json={"content": "x", "scope": scope}, headers=tenant.headers())
        assert fact.status_code == 422, (scope, fact.text)


@pytest.mark.parametrize("path", ["C:/x.md", "c:x.md", "%2e%2e/x.md", "a/%2E/x.md", "a/%2fb.md"])
async def test_drive_letters_and_encoded_dot_segments_are_not_document_or_code_paths(
    client: httpx.AsyncClient, make_tenant: TenantFactory, path: str
) -> None:
    tenant = await make_tenant()
    document = await client.put(
        "/v1/documents", json={"path": path, "content": "# x"}, headers=tenant.headers()
    )
    assert document.status_code == 422, document.text
    code = await client.put(
        "/v1/code/files",
        json={"repository": "r", "files": [{"path": path.replace(".md", ".py"), "content": "x = 1\n"}]},
        headers=tenant.headers(),
    )
    assert code.status_code == 422, code.text
    listed = await client.get("/v1/documents:list", headers=tenant.headers("reader"))
    assert listed.json()["documents"] == []


async def test_a_field_over_its_length_is_a_422_and_only_the_body_cap_is_a_413(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant()
    for path, body in (
        ("/v1/search", {"query": "q" * 4001}),
        ("/v1/facts", {"content": "c", "tags": ["t" * 65]}),
        ("/v1/facts", {"content": "c", "subject": "s" * 201}),
        ("/v1/memories:batch", {"items": [{"type": "rule", "content": "r"}] * 1001}),
    ):
        response = await client.post(path, json=body, headers=tenant.headers())
        assert response.status_code == 422, (path, response.text)
        assert response.json()["error"]["code"] == "validation_error"
