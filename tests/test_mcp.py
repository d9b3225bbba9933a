"""The MCP endpoint: same tools, same auth, same isolation as the REST API."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import TenantFactory, TenantKeys


async def _rpc(client: httpx.AsyncClient, tenant: TenantKeys, role: str, method: str, **params: Any) -> Any:
    response = await client.post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        headers={**tenant.headers(role), "Accept": "application/json, text/event-stream"},
    )
    assert response.status_code == 200, response.text
    return response.json()


async def test_initialize_and_tools_by_role(client: httpx.AsyncClient, make_tenant: TenantFactory) -> None:
    tenant = await make_tenant("mcp")
    init = await _rpc(client, tenant, "reader", "initialize", protocolVersion="2025-03-26", capabilities={})
    assert init["result"]["protocolVersion"] == "2025-03-26"
    assert init["result"]["serverInfo"]["name"] == "recalld"
    note = await client.post(
        "/mcp",
        json={"jsonrpc": "2.0", "method": "notifications/initialized"},
        headers=tenant.headers("reader"),
    )
    assert note.status_code == 202
    reader_tools = {
        t["name"] for t in (await _rpc(client, tenant, "reader", "tools/list"))["result"]["tools"]
    }
    assert {"memory_search", "memory_recall", "memory_get", "code_research"} <= reader_tools
    assert "memory_store_fact" not in reader_tools
    writer_tools = {
        t["name"] for t in (await _rpc(client, tenant, "writer", "tools/list"))["result"]["tools"]
    }
    assert "memory_store_fact" in writer_tools
    unknown = await _rpc(client, tenant, "reader", "resources/list")
    assert unknown["error"]["code"] == -32601
    not_an_object = await client.post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": "memory_search"},
        headers=tenant.headers("reader"),
    )
    assert not_an_object.status_code == 200
    assert not_an_object.json() == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32602, "message": "invalid params: expected an object"},
    }
    anonymous = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert anonymous.status_code == 401


async def test_tools_call_the_same_services(client: httpx.AsyncClient, make_tenant: TenantFactory) -> None:
    tenant = await make_tenant("mcp")
    other = await make_tenant("mcp")
    stored = await _rpc(
        client,
        tenant,
        "writer",
        "tools/call",
        name="memory_store_fact",
        arguments={"content": "The user's passport expires in March 2027", "importance": 8},
    )
    fact = stored["result"]["structuredContent"]
    assert fact["type"] == "fact" and fact["importance"] == 8
    found = await _rpc(
        client, tenant, "reader", "tools/call", name="memory_search", arguments={"query": "passport"}
    )
    assert [r["id"] for r in found["result"]["structuredContent"]["results"]] == [fact["id"]]
    got = await _rpc(client, tenant, "reader", "tools/call", name="memory_get", arguments={"id": fact["id"]})
    assert got["result"]["structuredContent"]["reference_count"] == 2
    hidden = await _rpc(
        client, other, "reader", "tools/call", name="memory_get", arguments={"id": fact["id"]}
    )
    assert hidden["result"]["isError"] is True and "not_found" in hidden["result"]["content"][0]["text"]
    nothing = await _rpc(
        client, other, "reader", "tools/call", name="memory_search", arguments={"query": "passport"}
    )
    assert nothing["result"]["structuredContent"]["results"] == []
    denied = await _rpc(
        client, tenant, "reader", "tools/call", name="memory_store_fact", arguments={"content": "x"}
    )
    assert denied["result"]["isError"] is True and "forbidden" in denied["result"]["content"][0]["text"]
    invalid = await _rpc(
        client,
        tenant,
        "writer",
        "tools/call",
        name="memory_store_fact",
        arguments={"content": "x", "importance": 99},
    )
    assert invalid["result"]["isError"] is True and "importance" in invalid["result"]["content"][0]["text"]


async def test_every_rest_operation_is_a_tool_with_the_rest_response_shape(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant("mcp")
    other = await make_tenant("mcp")
    doc = (await client.get("/openapi.json")).json()
    rest_operations = {
        operation["operationId"]
        for path, operations in doc["paths"].items()
        if path.startswith("/v1/")
        for operation in operations.values()
    }
    admin_tools = {t["name"] for t in (await _rpc(client, tenant, "admin", "tools/list"))["result"]["tools"]}
    assert admin_tools == rest_operations

    async def call(role: str, name: str, who: TenantKeys = tenant, /, **arguments: Any) -> Any:
        answer = await _rpc(client, who, role, "tools/call", name=name, arguments=arguments)
        return answer["result"]

    stored = await client.post(
        "/v1/facts", json={"content": "The boiler is serviced every October"}, headers=tenant.headers()
    )
    fact_id = stored.json()["id"]
    rest = (await client.get(f"/v1/memories/{fact_id}", headers=tenant.headers("reader"))).json()
    tool = (await call("reader", "memory_get", id=fact_id))["structuredContent"]
    # Same body as REST, apart from what moves with time: the reference bump and the decay.
    assert tool["reference_count"] == rest["reference_count"] + 1
    moving = ("reference_count", "last_referenced_at", "effective_confidence")
    assert {k: v for k, v in tool.items() if k not in moving} == {
        k: v for k, v in rest.items() if k not in moving
    }
    assert tool["created_at"] == stored.json()["created_at"]

    batch = await call("writer", "memory_store_batch", items=[{"type": "rule", "content": "Wake at 7"}])
    assert [m["content"] for m in batch["structuredContent"]["items"]] == ["Wake at 7"]
    confirmed = await call("writer", "memory_confirm", id=fact_id)
    assert abs(confirmed["structuredContent"]["effective_confidence"] - 1.0) < 1e-6

    put = await call("writer", "document_put", path="MEMORY.md", content="line one\nline two\n")
    assert put["structuredContent"] == {"path": "MEMORY.md", "chunks": 1, "embedded": 1, "unchanged": False}
    part = await call("reader", "document_get", path="MEMORY.md", **{"from": 2, "lines": 1})
    assert part["structuredContent"]["content"] == "line two"
    assert part["structuredContent"]["from"] == 2
    listed = await call("reader", "document_list")
    assert [d["path"] for d in listed["structuredContent"]["documents"]] == ["MEMORY.md"]
    assert (await call("reader", "document_list", other))["structuredContent"] == {"documents": []}
    hidden = await call("reader", "document_get", other, path="MEMORY.md")
    assert hidden["isError"] is True and "not_found" in hidden["content"][0]["text"]
    assert (await call("writer", "document_delete", path="MEMORY.md"))["isError"] is False
    assert (await call("reader", "document_list"))["structuredContent"] == {"documents": []}

    weights = {"relevance": 0.7, "importance": 0.1, "recency": 0.1, "confidence": 0.1}
    denied = await call("writer", "scope_settings_put", scope="health", settings={"score_weights": weights})
    assert denied["isError"] is True and "forbidden" in denied["content"][0]["text"]
    await call("admin", "scope_settings_put", scope="health", settings={"score_weights": weights})
    assert (await call("reader", "scope_settings_get", scope="health"))["structuredContent"] == {
        "score_weights": weights
    }
    assert (await call("reader", "scope_settings_get", other, scope="health"))["structuredContent"] == {}

    assert (await call("writer", "memory_forget", other, id=fact_id))["isError"] is True
    assert (await call("writer", "memory_forget", id=fact_id))["structuredContent"] == {
        "id": fact_id,
        "forgotten": True,
    }
    gone = await client.get(f"/v1/memories/{fact_id}", headers=tenant.headers("reader"))
    assert gone.status_code == 404
