"""What an agent pays for mounting recalld: the size of tools/list, its toolsets and annotations."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support import TenantFactory, TenantKeys

# About 4,000 tokens: what every turn of an agent that mounts recalld carries before it does anything.
MAX_TOOLS_LIST_CHARS = 16_000
# MCP tools that only read although their REST operation is a POST (a query body).
POST_READS = {"memory_search", "memory_recall", "code_research"}


async def _rpc(
    client: httpx.AsyncClient,
    tenant: TenantKeys,
    role: str,
    method: str,
    params: dict[str, Any],
    url: str = "/mcp",
) -> httpx.Response:
    return await client.post(
        url,
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
        headers={
            **tenant.headers(role),
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18",
        },
    )


async def _tools(
    client: httpx.AsyncClient, tenant: TenantKeys, role: str, url: str = "/mcp"
) -> list[dict[str, Any]]:
    answer = await _rpc(client, tenant, role, "tools/list", {}, url)
    assert answer.status_code == 200, answer.text
    tools: list[dict[str, Any]] = answer.json()["result"]["tools"]
    return tools


@pytest.mark.parametrize("operator", [False, True], ids=["tenant-key", "operator-key"])
async def test_tools_list_stays_under_the_limit_for_every_role(
    client: httpx.AsyncClient, make_tenant: TenantFactory, operator: bool
) -> None:
    tenant = await make_tenant("surface", operator=operator)
    for role in ("reader", "writer", "admin"):
        tools = await _tools(client, tenant, role)
        # Measured as the issue measured it: the `tools` array as json.dumps writes it.
        size = len(json.dumps(tools))
        print(f"tools/list {role}{' operator' if operator else ''}: {len(tools)} tools, {size} chars")
        assert size <= MAX_TOOLS_LIST_CHARS, (
            f"{role}: {size} characters of tools/list; list a new parameter or tool under an opt-in "
            "toolset (`gated`, `toolset` in app/api/mcp_tools.py) or give it a shorter `hints` description"
        )
    names = {tool["name"] for tool in await _tools(client, tenant, "writer")}
    # What an agent needs is there by default.
    assert names == {
        "memory_search",
        "memory_recall",
        "memory_get",
        "memory_store_fact",
        "memory_store_rule",
        "memory_store_episode",
        "memory_forget",
        "document_put",
        "document_get",
        "document_list",
        "document_delete",
    }


async def test_every_tool_is_annotated_as_its_rest_operation_behaves(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant("surface")
    tools = await _tools(client, tenant, "admin", "/mcp?toolsets=all")
    doc = (await client.get("/openapi.json")).json()
    methods = {
        operation["operationId"]: method.upper()
        for path, operations in doc["paths"].items()
        if path.startswith("/v1/")
        for method, operation in operations.items()
    }
    # The tenant export is a stream no tool result carries: REST only (see test_mcp.py).
    assert {tool["name"] for tool in tools} == set(methods) - {"tenant_export"}
    for tool in tools:
        name, hints, method = tool["name"], tool["annotations"], methods[tool["name"]]
        assert set(hints) == {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}, name
        assert hints["openWorldHint"] is False, name
        assert hints["readOnlyHint"] is (method == "GET" or name in POST_READS), name
        # PUT replaces what was stored under the same name, DELETE removes it: both destroy, both
        # can be repeated; POST writes add (or, for confirm, refresh) and destroy nothing.
        assert hints["destructiveHint"] is (method in {"PUT", "DELETE"}), name
        if method in {"PUT", "DELETE", "GET"}:
            assert hints["idempotentHint"] is True, name
        assert isinstance(tool.get("outputSchema"), dict) and tool["outputSchema"]["type"] == "object", name


async def test_toolsets_add_tools_and_parameters_to_the_list(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant("surface")
    default = {tool["name"]: tool for tool in await _tools(client, tenant, "writer")}
    more = {
        tool["name"]: tool for tool in await _tools(client, tenant, "writer", "/mcp?toolsets=code,tuning")
    }
    assert set(more) - set(default) == {
        "code_index_files",
        "code_list_files",
        "code_delete_file",
        "code_research",
    }
    added = set(more["memory_search"]["inputSchema"]["properties"]) - set(
        default["memory_search"]["inputSchema"]["properties"]
    )
    assert {"repository", "symbol", "fusion", "rerank", "exact"} <= added
    assert "tenants" not in added  # operator keys only
    admin = {
        tool["name"] for tool in await _tools(client, tenant, "admin", "/mcp?toolsets=scopes,curation,import")
    }
    assert {
        "scope_settings_put",
        "scope_settings_get",
        "memory_list",
        "memory_confirm",
        "memory_store_batch",
    } <= admin
    reader = {tool["name"] for tool in await _tools(client, tenant, "reader", "/mcp?toolsets=all")}
    assert "scope_settings_get" in reader and "scope_settings_put" not in reader

    bad = await _rpc(client, tenant, "writer", "tools/list", {}, "/mcp?toolsets=code,everything")
    assert bad.status_code == 422
    assert bad.json()["error"]["message"] == (
        "unknown toolset 'everything' in /mcp?toolsets=: choose from "
        "memory, documents, curation, import, scopes, code, tuning, all"
    )


async def test_operator_keys_see_the_cross_tenant_parameters(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    plain = await make_tenant("surface")
    operator = await make_tenant("surface", operator=True)
    for tenant, shown in ((plain, False), (operator, True)):
        tools = {tool["name"]: tool for tool in await _tools(client, tenant, "reader")}
        for name in ("memory_search", "memory_recall"):
            properties = tools[name]["inputSchema"]["properties"]
            assert ({"tenants", "all_tenants"} <= set(properties)) is shown, name


async def test_parameters_left_off_the_list_still_work(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant("surface")
    stored = await _rpc(
        client,
        tenant,
        "writer",
        "tools/call",
        {
            "name": "memory_store_fact",
            "arguments": {
                "content": "The lighthouse was painted in 1998",
                "created_at": "2024-05-01T00:00:00Z",
            },
        },
    )
    fact = stored.json()["result"]["structuredContent"]
    assert fact["created_at"] == "2024-05-01T00:00:00Z"
    found = await _rpc(
        client,
        tenant,
        "reader",
        "tools/call",
        {
            "name": "memory_search",
            # A fact from 2024 has lost its confidence by now; min_confidence 0 still finds it.
            "arguments": {"query": "lighthouse", "fusion": "rrf", "exact": True, "min_confidence": 0},
        },
    )
    result = found.json()["result"]
    assert result["isError"] is False
    assert [hit["id"] for hit in result["structuredContent"]["results"]] == [fact["id"]]
    assert result["structuredContent"]["results"][0]["score_breakdown"]["fusion"] == "rrf"
    # A plain key's cross-tenant parameter is refused as over REST, not ignored.
    refused = await _rpc(
        client,
        tenant,
        "reader",
        "tools/call",
        {"name": "memory_search", "arguments": {"query": "lighthouse", "all_tenants": True}},
    )
    assert refused.json()["result"]["isError"] is True
