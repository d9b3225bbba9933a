"""MCP at /mcp, driven by the official SDK client: same tools, auth, errors and isolation as REST."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

import httpx
import httpx2
import mcp_types as types
import pytest
from fastapi import FastAPI
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from app.api.mcp_tools import TOOLS
from app.api.schemas.code import ResearchIn
from app.api.schemas.memories import FactIn
from app.api.schemas.retrieval import SearchIn
from tests.support import TenantFactory, TenantKeys

URL = "http://recalld.test/mcp"
# The SDK speaks two eras: the initialize handshake (2025 revisions, ClientSession) and the
# stateless per-request envelope (2026-07-28, what Client negotiates by default).
ERAS = ("handshake", "2026-07-28")


class ToolClient(Protocol):
    """What ClientSession and Client have in common."""

    async def list_tools(self) -> types.ListToolsResult: ...

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> types.CallToolResult: ...


McpConnect = Callable[..., AbstractAsyncContextManager[ToolClient]]


@pytest.fixture(params=ERAS)
def connect(app: FastAPI, request: pytest.FixtureRequest) -> McpConnect:
    """Open an MCP connection to the running app with a tenant's key of some role."""
    era: str = request.param

    @asynccontextmanager
    async def open_connection(
        tenant: TenantKeys, role: str, headers: dict[str, str] | None = None, toolsets: str | None = None
    ) -> AsyncIterator[ToolClient]:
        url = f"{URL}?toolsets={toolsets}" if toolsets else URL
        async with httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=app), headers={**tenant.headers(role), **(headers or {})}
        ) as http:
            if era == "handshake":
                async with (
                    streamable_http_client(url, http_client=http) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    init = await session.initialize()
                    assert init.server_info.name == "recalld"
                    yield session
            else:
                async with Client(streamable_http_client(url, http_client=http), mode=era) as client:
                    assert client.protocol_version == era
                    yield client

    return open_connection


def _error(result: types.CallToolResult) -> dict[str, Any]:
    """The REST error body a failed tool call carries."""
    assert result.is_error is True
    assert isinstance(result.content[0], types.TextContent)
    body: dict[str, Any] = json.loads(result.content[0].text)["error"]
    return body


async def test_tools_by_role_with_the_rest_input_models(
    connect: McpConnect, client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant("mcp")
    async with connect(tenant, "reader") as reader:
        listed = {t.name: t for t in (await reader.list_tools()).tools}
    assert set(listed) == {"memory_search", "memory_recall", "memory_get", "document_get", "document_list"}
    # The listed parameters are the REST model's, without those this key or toolset does not use.
    search = listed["memory_search"].input_schema
    assert set(search["properties"]) < set(SearchIn.model_fields)
    assert {"query", "scope", "limit", "types", "filters"} <= set(search["properties"])
    assert search["required"] == ["query"] and search["additionalProperties"] is False
    assert not {"tenants", "all_tenants", "exact", "repository", "symbol"} & set(search["properties"])
    async with connect(tenant, "writer", toolsets="code") as writer:
        writer_tools = {t.name: t for t in (await writer.list_tools()).tools}
    assert {"memory_store_fact", "memory_forget", "document_put", "code_research"} <= set(writer_tools)
    assert "scope_settings_put" not in writer_tools and "memory_store_batch" not in writer_tools
    assert set(writer_tools["code_research"].input_schema["properties"]) == set(ResearchIn.model_fields)
    assert {"repository", "symbol", "depth"} <= set(writer_tools["memory_search"].input_schema["properties"])
    fact = writer_tools["memory_store_fact"].input_schema
    back_dating = {"created_at", "last_confirmed_at", "valid_from", "valid_to"}  # the import toolset
    assert set(fact["properties"]) == set(FactIn.model_fields) - back_dating
    assert fact["properties"]["importance"] == {
        "default": 5.0,
        "description": "How much this matters, 0–10.",
        "maximum": 10,
        "minimum": 0,
        "type": "number",
    }

    doc = (await client.get("/openapi.json")).json()
    rest_operations = {
        operation["operationId"]
        for path, operations in doc["paths"].items()
        if path.startswith("/v1/")
        for operation in operations.values()
    }
    # The tenant export streams a whole tenant as NDJSON for `recalld import`: a download for
    # operators, which no single tool result could carry.
    not_tools = {"tenant_export"}
    async with connect(tenant, "admin", toolsets="all") as admin:
        assert {t.name for t in (await admin.list_tools()).tools} == rest_operations - not_tools


async def test_store_search_get_and_tenant_isolation(connect: McpConnect, make_tenant: TenantFactory) -> None:
    tenant = await make_tenant("mcp")
    other = await make_tenant("mcp")
    async with connect(tenant, "writer") as writer:
        stored = await writer.call_tool(
            "memory_store_fact", {"content": "The user's passport expires in March 2027", "importance": 8}
        )
        assert stored.is_error is False
        fact = stored.structured_content
        assert fact is not None and fact["type"] == "fact" and fact["importance"] == 8
        # Text content carries the same JSON for clients that ignore structured content.
        assert isinstance(stored.content[0], types.TextContent)
        assert fact["id"] in stored.content[0].text
    async with connect(tenant, "reader") as reader:
        found = await reader.call_tool("memory_search", {"query": "passport"})
        assert found.structured_content is not None
        assert [r["id"] for r in found.structured_content["results"]] == [fact["id"]]
        recalled = await reader.call_tool("memory_recall", {"topic": "passport expiry"})
        assert recalled.structured_content is not None
        assert [r["id"] for r in recalled.structured_content["results"]] == [fact["id"]]
        got = await reader.call_tool("memory_get", {"id": fact["id"]})
        assert got.structured_content is not None
        assert got.structured_content["content"] == "The user's passport expires in March 2027"
        assert got.structured_content["reference_count"] == 3  # search, recall and get each count
        listed = await reader.call_tool("memory_list", {"type": "fact"})
        assert listed.structured_content is not None
        assert [m["id"] for m in listed.structured_content["items"]] == [fact["id"]]
        assert listed.structured_content["next_cursor"] is None
    async with connect(other, "admin") as stranger:
        hidden = await stranger.call_tool("memory_get", {"id": fact["id"]})
        assert _error(hidden) == {"code": "not_found", "message": "memory not found", "details": None}
        nothing = await stranger.call_tool("memory_search", {"query": "passport"})
        assert nothing.structured_content is not None and nothing.structured_content["results"] == []
        none_listed = await stranger.call_tool("memory_list", {"type": "fact"})
        assert none_listed.structured_content == {"items": [], "next_cursor": None}
        assert _error(await stranger.call_tool("memory_forget", {"id": fact["id"]}))["code"] == "not_found"
    async with connect(tenant, "reader") as reader:
        still = await reader.call_tool("memory_get", {"id": fact["id"]})
        assert still.is_error is False


async def test_tool_errors_are_results_and_the_connection_goes_on(
    connect: McpConnect, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant("mcp")
    async with connect(tenant, "reader") as reader:
        denied = _error(await reader.call_tool("memory_store_fact", {"content": "x"}))
        assert denied == {
            "code": "forbidden",
            "message": "this operation needs the writer role; the key has reader",
            "details": None,
        }
        missing_argument = _error(await reader.call_tool("memory_search", {}))
        assert missing_argument["code"] == "validation_error"
        assert missing_argument["message"] == "query: Field required"
        with pytest.raises(MCPError, match="unknown tool 'memory_delete_everything'"):
            await reader.call_tool("memory_delete_everything", {})
        assert (await reader.call_tool("memory_search", {"query": "anything"})).is_error is False
    async with connect(tenant, "writer") as writer:
        invalid = _error(await writer.call_tool("memory_store_fact", {"content": "x", "importance": 99}))
        assert invalid["code"] == "validation_error"
        assert invalid["message"] == "importance: Input should be less than or equal to 10"
        assert invalid["details"][0]["loc"] == ["importance"]
        unknown_field = _error(await writer.call_tool("memory_store_fact", {"content": "x", "colour": "red"}))
        assert unknown_field["details"][0]["loc"] == ["colour"]
        later = await writer.call_tool("memory_store_fact", {"content": "Stored after two refusals"})
        assert later.is_error is False
    async with connect(tenant, "reader") as reader:
        found = await reader.call_tool("memory_search", {"query": "refusals", "mode": "keyword"})
        assert found.structured_content is not None
        assert [r["content"] for r in found.structured_content["results"]] == ["Stored after two refusals"]


async def test_an_unexpected_failure_is_a_tool_error_not_a_500(
    connect: McpConnect,
    make_tenant: TenantFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(*_: Any) -> Any:
        raise RuntimeError("the disk caught fire")

    monkeypatch.setitem(TOOLS, "memory_get", dataclasses.replace(TOOLS["memory_get"], run=broken))
    tenant = await make_tenant("mcp")
    async with connect(tenant, "reader") as reader:
        failed = _error(await reader.call_tool("memory_get", {"id": "5a4744e1-b384-42ad-b3e8-ea224528b272"}))
        assert failed == {"code": "internal_error", "message": "internal server error", "details": None}
        assert (await reader.call_tool("memory_search", {"query": "fire"})).is_error is False
    # The log names the tool, the exception type and the frames, never the message: messages
    # quote arguments (a user's glob, their text).
    failures = [r.getMessage() for r in caplog.records if r.name == "recalld.mcp"]
    assert failures and all("RuntimeError" in m and "caught fire" not in m for m in failures)


async def test_every_rest_operation_answers_the_rest_response_shape(
    connect: McpConnect, client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant("mcp")
    other = await make_tenant("mcp")
    stored = await client.post(
        "/v1/facts", json={"content": "The boiler is serviced every October"}, headers=tenant.headers()
    )
    fact_id = stored.json()["id"]
    rest = (await client.get(f"/v1/memories/{fact_id}", headers=tenant.headers("reader"))).json()
    everything = {"toolsets": "all"}
    async with (
        connect(tenant, "admin", **everything) as admin,
        connect(other, "admin", **everything) as stranger,
    ):

        async def call(name: str, who: ToolClient = admin, /, **arguments: Any) -> types.CallToolResult:
            return await who.call_tool(name, arguments)

        tool = (await call("memory_get", id=fact_id)).structured_content
        assert tool is not None
        # Same body as REST, apart from what moves with time: the reference bump and the decay.
        assert tool["reference_count"] == rest["reference_count"] + 1
        moving = ("reference_count", "last_referenced_at", "effective_confidence")
        assert {k: v for k, v in tool.items() if k not in moving} == {
            k: v for k, v in rest.items() if k not in moving
        }
        assert tool["created_at"] == stored.json()["created_at"]

        batch = (
            await call("memory_store_batch", items=[{"type": "rule", "content": "Wake at 7"}])
        ).structured_content
        assert batch is not None and [m["content"] for m in batch["items"]] == ["Wake at 7"]
        confirmed = (await call("memory_confirm", id=fact_id)).structured_content
        assert confirmed is not None and abs(confirmed["effective_confidence"] - 1.0) < 1e-6

        put = await call("document_put", path="MEMORY.md", content="line one\nline two\n")
        assert put.structured_content == {"path": "MEMORY.md", "chunks": 1, "embedded": 1, "unchanged": False}
        part = (await call("document_get", path="MEMORY.md", **{"from": 2, "lines": 1})).structured_content
        assert part is not None and part["content"] == "line two" and part["from"] == 2
        listed = (await call("document_list")).structured_content
        assert listed is not None and [d["path"] for d in listed["documents"]] == ["MEMORY.md"]
        assert (await call("document_list", stranger)).structured_content == {"documents": []}
        assert _error(await call("document_get", stranger, path="MEMORY.md"))["code"] == "not_found"
        deleted = await call("document_delete", path="MEMORY.md")
        assert deleted.structured_content == {"path": "MEMORY.md", "deleted": True}
        assert (await call("document_list")).structured_content == {"documents": []}

        source = "def boil():\n    return heat()\n\n\ndef heat():\n    return 90\n"
        indexed = await call(
            "code_index_files", repository="home", files=[{"path": "boiler.py", "content": source}]
        )
        assert indexed.structured_content is not None and indexed.structured_content["files"] == 1
        files = (await call("code_list_files", repository="home")).structured_content
        assert files is not None and [f["path"] for f in files["files"]] == ["boiler.py"]
        callers = (await call("code_research", kind="callers", symbol="heat")).structured_content
        assert callers is not None and [i["symbol"] for i in callers["items"]] == ["boil"]
        assert (await call("code_list_files", stranger, repository="home")).structured_content == {
            "repository": "home",
            "files": [],
        }
        removed = await call("code_delete_file", repository="home", path="boiler.py")
        assert removed.structured_content == {"repository": "home", "path": "boiler.py", "deleted": True}

        weights = {"relevance": 0.7, "importance": 0.1, "recency": 0.1, "confidence": 0.1}
        await call("scope_settings_put", scope="health", settings={"score_weights": weights})
        assert (await call("scope_settings_get", scope="health")).structured_content == {
            "score_weights": weights
        }
        assert (await call("scope_settings_get", stranger, scope="health")).structured_content == {}

        forgotten = await call("memory_forget", id=fact_id)
        assert forgotten.structured_content == {"id": fact_id, "forgotten": True}
    async with connect(tenant, "writer") as writer:
        denied = _error(await writer.call_tool("scope_settings_put", {"scope": "health", "settings": {}}))
        assert denied["code"] == "forbidden"
    gone = await client.get(f"/v1/memories/{fact_id}", headers=tenant.headers("reader"))
    assert gone.status_code == 404


def _post(tenant: TenantKeys | None, body: Any, **headers: str) -> dict[str, Any]:
    return {
        "json": body,
        "headers": {
            **(tenant.headers("writer") if tenant else {}),
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-06-18",
            **headers,
        },
    }


def _store_call(request_id: int, content: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "memory_store_fact", "arguments": {"content": content}},
    }


async def test_keys_are_checked_before_any_mcp_handling(
    client: httpx.AsyncClient, connect: McpConnect, make_tenant: TenantFactory
) -> None:
    anonymous = await client.post("/mcp", **_post(None, _store_call(1, "anonymous")))
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "unauthorized"
    assert "missing API key" in anonymous.json()["error"]["message"]
    tenant = await make_tenant("mcp")
    revoked = dataclasses.replace(tenant, writer="rk_00000000_not-a-key")
    wrong = await client.post("/mcp", **_post(revoked, _store_call(1, "wrong key")))
    assert wrong.status_code == 401
    assert wrong.json() == {
        "error": {"code": "unauthorized", "message": "invalid or revoked API key", "details": None}
    }
    # The SDK client sees the refusal as a failed request (inside its task groups).
    with pytest.RaisesGroup(pytest.RaisesExc(MCPError, match="error response"), flatten_subgroups=True):
        async with connect(revoked, "writer") as refused:
            await refused.list_tools()


async def test_a_browser_origin_not_allowed_is_refused(
    client: httpx.AsyncClient, connect: McpConnect, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant("mcp")
    evil = await client.post("/mcp", **_post(tenant, _store_call(1, "rebound"), Origin="http://evil.example"))
    assert evil.status_code == 403
    assert evil.json()["error"] == {
        "code": "forbidden",
        "message": "origin 'http://evil.example' may not call /mcp (RECALLD_MCP_ALLOWED_ORIGINS)",
        "details": None,
    }
    lookalike = await client.post(
        "/mcp", **_post(tenant, _store_call(1, "rebound"), Origin="http://localhost:80.evil.example")
    )
    assert lookalike.status_code == 403
    # The SDK client sees the refusal as a failed request (inside its task groups).
    with pytest.RaisesGroup(pytest.RaisesExc(MCPError, match="error response"), flatten_subgroups=True):
        async with connect(tenant, "reader", {"Origin": "http://evil.example"}) as refused:
            await refused.list_tools()
    local = await client.post(
        "/mcp", **_post(tenant, _store_call(1, "from a local page"), Origin="http://localhost:5173")
    )
    assert local.status_code == 200 and local.json()["result"]["isError"] is False
    found = await client.post(
        "/v1/search", json={"query": "rebound", "mode": "keyword"}, headers=tenant.headers("reader")
    )
    assert found.json()["results"] == []


async def test_json_rpc_batches_are_refused_and_change_nothing(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant("mcp")
    batch = [_store_call(1, "first of a batch"), _store_call(2, "second of a batch")]
    refused = await client.post("/mcp", **_post(tenant, batch))
    assert refused.status_code == 400
    found = await client.post(
        "/v1/search", json={"query": "batch", "mode": "keyword"}, headers=tenant.headers("reader")
    )
    assert found.json()["results"] == []
    single = await client.post("/mcp", **_post(tenant, _store_call(3, "one at a time")))
    assert single.status_code == 200
    assert single.json()["result"]["structuredContent"]["content"] == "one at a time"
    metrics = (await client.get("/metrics")).text
    assert 'route="/mcp",status="400"' in metrics and 'route="/mcp",status="200"' in metrics


async def test_only_post_is_served(client: httpx.AsyncClient, make_tenant: TenantFactory) -> None:
    tenant = await make_tenant("mcp")
    headers = {
        **tenant.headers("reader"),
        "Accept": "text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    for method in ("GET", "DELETE"):
        # Stateless: no stream to open (a GET used to hang on an empty one), no session to end.
        refused = await asyncio.wait_for(client.request(method, "/mcp", headers=headers), timeout=10)
        assert refused.status_code == 405
        assert refused.headers["allow"] == "POST"
        assert refused.json()["error"]["code"] == "method_not_allowed"


async def test_an_unknown_protocol_version_is_refused_before_any_tool_runs(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant("mcp")
    version = {"MCP-Protocol-Version": "1999-01-01"}
    odd = await client.post("/mcp", **_post(tenant, _store_call(1, "from the future"), **version))
    assert odd.status_code == 400
    assert "result" not in odd.json() and odd.json()["error"]["code"] == types.INVALID_PARAMS
    found = await client.post(
        "/v1/search", json={"query": "future", "mode": "keyword"}, headers=tenant.headers("reader")
    )
    assert found.json()["results"] == []


async def test_an_older_client_gets_its_protocol_version_and_no_session(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant("mcp")
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-03-26",
            "capabilities": {},
            "clientInfo": {"name": "old-agent", "version": "1"},
        },
    }
    answer = await client.post("/mcp", **_post(tenant, initialize))
    assert answer.status_code == 200
    assert answer.json()["result"]["protocolVersion"] == "2025-03-26"
    assert answer.json()["result"]["serverInfo"]["name"] == "recalld"
    # Stateless: no session to remember, so any worker can take the next request.
    assert "mcp-session-id" not in answer.headers
