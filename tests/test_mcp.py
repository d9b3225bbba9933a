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
