"""Writes that collide with a concurrent writer (deadlock, serialization failure) are re-run whole.

A document upload once ran in a plain transaction: one deadlock with another writer answered
503 "retry" although running the transaction again would have stored the file.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx
import pytest

from app.repositories import documents as doc_repo
from tests.support import TenantFactory, TenantKeys, failing_first, search

PATH = "notes/heron.md"
BODY = "# Notes\n\nThe heron nests by the old mill pond every spring.\n"


def _failing(exc: Exception, times: int) -> Any:
    return failing_first(doc_repo.upsert_document, exc, times)


async def _upload(client: httpx.AsyncClient, tenant: TenantKeys) -> httpx.Response:
    return await client.put("/v1/documents", json={"path": PATH, "content": BODY}, headers=tenant.headers())


async def _stored(client: httpx.AsyncClient, tenant: TenantKeys) -> tuple[list[str], list[str]]:
    """The tenant's stored paths, and the document chunks a keyword search finds."""
    listed = await client.get("/v1/documents:list", headers=tenant.headers("reader"))
    assert listed.status_code == 200, listed.text
    found = await search(
        client, tenant, query="heron mill pond", mode="keyword", types=["document"], min_score=0
    )
    return [d["path"] for d in listed.json()["documents"]], [r["content"] for r in found["results"]]


async def test_a_deadlock_in_a_document_upload_is_retried_and_the_file_is_stored_once(
    client: httpx.AsyncClient, make_tenant: TenantFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It answered 503 although the upload's chunks and file were written again on the next try."""
    tenant = await make_tenant()
    monkeypatch.setattr(doc_repo, "upsert_document", _failing(asyncpg.DeadlockDetectedError("x"), 1))
    uploaded = await _upload(client, tenant)
    assert uploaded.status_code == 200, uploaded.text
    assert uploaded.json()["unchanged"] is False
    monkeypatch.undo()
    paths, chunks = await _stored(client, tenant)
    assert paths == [PATH]
    assert len(chunks) == 1, chunks


async def test_an_upload_that_keeps_deadlocking_answers_503_and_stores_nothing(
    client: httpx.AsyncClient, make_tenant: TenantFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When every try collides the answer is 503 with Retry-After, and neither file nor chunk stays."""
    tenant = await make_tenant()
    monkeypatch.setattr(doc_repo, "upsert_document", _failing(asyncpg.DeadlockDetectedError("x"), 10))
    failed = await _upload(client, tenant)
    assert failed.status_code == 503, failed.text
    assert "Retry-After" in failed.headers
    monkeypatch.undo()
    assert await _stored(client, tenant) == ([], [])
    assert (await _upload(client, tenant)).status_code == 200
    paths, chunks = await _stored(client, tenant)
    assert paths == [PATH]
    assert len(chunks) == 1, chunks
