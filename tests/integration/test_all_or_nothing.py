"""Every write is all or nothing: failed in the middle (quota, embedder, database), it changes nothing."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.repositories import code as code_repo
from app.repositories import documents as doc_repo
from app.repositories import memories as memory_repo
from app.state import ServiceState
from tests.support import TenantFactory, TenantKeys


def _source(name: str) -> str:
    return f"def {name}():\n    return '{name}'\n\n\ndef {name}_helper():\n    return {name}()\n"


async def _code_files(client: httpx.AsyncClient, tenant: TenantKeys) -> dict[str, str]:
    listed = await client.get("/v1/code/files", params={"repository": "r"}, headers=tenant.headers("reader"))
    assert listed.status_code == 200, listed.text
    return {f["path"]: f["content_hash"] for f in listed.json()["files"]}


async def _found(client: httpx.AsyncClient, tenant: TenantKeys, query: str, types: list[str]) -> list[str]:
    found = await client.post(
        "/v1/search",
        json={"query": query, "mode": "keyword", "types": types, "min_score": 0, "limit": 100},
        headers=tenant.headers("reader"),
    )
    assert found.status_code == 200, found.text
    return sorted(r["content"] for r in found.json()["results"])


def _fail_on_call(number: int, original: Any) -> Any:
    """A stand-in for a repository or embedder function that raises on its `number`th call."""
    calls = 0

    async def failing(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == number:
            raise RuntimeError("injected failure in the middle of a write")
        return await original(*args, **kwargs)

    return failing


async def test_a_code_upload_refused_by_quota_stores_nothing(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    service: ServiceState,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 46 of 50 memories, three files were a 413 and yet two of them stayed listed and searchable."""
    monkeypatch.setattr(service.settings, "tenant_max_memories", 50)
    tenant = await make_tenant()
    items = [{"type": "fact", "content": f"filler fact {i}"} for i in range(46)]
    filled = await client.post("/v1/memories:batch", json={"items": items}, headers=tenant.headers())
    assert filled.status_code == 201, filled.text
    files = [{"path": f"src/m{i}.py", "content": _source(f"quokka{i}")} for i in range(3)]
    refused = await client.put(
        "/v1/code/files", json={"repository": "r", "files": files}, headers=tenant.headers()
    )
    assert refused.status_code == 413, refused.text
    assert refused.json()["error"]["code"] == "quota_exceeded"
    assert await _code_files(client, tenant) == {}
    assert await _found(client, tenant, "quokka0 quokka1 quokka2", ["code"]) == []
    fits = await client.put(
        "/v1/code/files", json={"repository": "r", "files": files[:1]}, headers=tenant.headers()
    )
    assert fits.status_code == 200, fits.text
    assert list(await _code_files(client, tenant)) == ["src/m0.py"]


@pytest.mark.parametrize("where", ["embedder", "repository"])
async def test_a_code_upload_failing_in_the_middle_keeps_the_stored_version(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    service: ServiceState,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    tenant = await make_tenant()
    first = [{"path": f"src/m{i}.py", "content": _source(f"wombat{i}")} for i in range(3)]
    stored = await client.put(
        "/v1/code/files", json={"repository": "r", "files": first}, headers=tenant.headers()
    )
    assert stored.status_code == 200, stored.text
    before = await _code_files(client, tenant)
    found_before = await _found(client, tenant, "wombat0 wombat1 wombat2", ["code"])
    assert found_before
    if where == "embedder":
        assert service.embedder is not None
        monkeypatch.setattr(
            service.embedder, "embed_documents", _fail_on_call(2, service.embedder.embed_documents)
        )
    else:
        monkeypatch.setattr(code_repo, "upsert_file", _fail_on_call(2, code_repo.upsert_file))
    second = [{"path": f"src/m{i}.py", "content": _source(f"numbat{i}")} for i in range(3)]
    failed = await client.put(
        "/v1/code/files", json={"repository": "r", "files": second}, headers=tenant.headers()
    )
    assert failed.status_code == 500, failed.text
    assert await _code_files(client, tenant) == before
    assert await _found(client, tenant, "wombat0 wombat1 wombat2", ["code"]) == found_before
    assert await _found(client, tenant, "numbat0 numbat1 numbat2", ["code"]) == []


async def test_a_document_replacement_failing_in_the_middle_keeps_the_stored_file(
    client: httpx.AsyncClient, make_tenant: TenantFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = await make_tenant()
    v1 = "# Notes\n\nThe quokka sleeps.\n\n## More\n\nThe quokka eats leaves.\n"
    v2 = "# Notes\n\nThe numbat digs.\n\n## More\n\nThe quokka eats leaves.\n"
    assert (
        await client.put("/v1/documents", json={"path": "notes.md", "content": v1}, headers=tenant.headers())
    ).status_code == 200
    found_before = await _found(client, tenant, "quokka numbat", ["document"])
    monkeypatch.setattr(doc_repo, "upsert_document", _fail_on_call(1, doc_repo.upsert_document))
    failed = await client.put(
        "/v1/documents", json={"path": "notes.md", "content": v2}, headers=tenant.headers()
    )
    assert failed.status_code == 500, failed.text
    read = await client.get("/v1/documents", params={"path": "notes.md"}, headers=tenant.headers("reader"))
    assert read.json()["content"] == v1
    assert await _found(client, tenant, "quokka numbat", ["document"]) == found_before


async def test_a_batch_failing_in_the_middle_stores_nothing_and_supersedes_nothing(
    client: httpx.AsyncClient, make_tenant: TenantFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant = await make_tenant()
    old = await client.post(
        "/v1/facts", json={"content": "The quokka lives on Rottnest"}, headers=tenant.headers()
    )
    old_id = old.json()["id"]
    # After the rows are inserted and the old fact is marked superseded, before the commit.
    monkeypatch.setattr(memory_repo, "fetch_memories", _fail_on_call(1, memory_repo.fetch_memories))
    items = [
        {"type": "fact", "content": "The quokka lives on Bald Island", "supersedes": old_id},
        {"type": "rule", "content": "Never feed a quokka"},
        {"type": "episode", "content": "Saw a quokka today", "butler": "b"},
    ]
    failed = await client.post("/v1/memories:batch", json={"items": items}, headers=tenant.headers())
    assert failed.status_code == 500, failed.text
    monkeypatch.undo()
    assert await _found(client, tenant, "quokka", ["fact", "rule", "episode"]) == [
        "The quokka lives on Rottnest"
    ]
    kept = await client.get(f"/v1/memories/{old_id}", headers=tenant.headers("reader"))
    assert kept.json()["validity"] == "active"
