"""A write whose tenant is deleted after its key was accepted: a clear 404, nothing stored, no 500."""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx
import pytest

from app.api import deps
from app.auth import Principal
from app.services import tenants as tenant_service
from tests.integration.test_tenant_lifecycle import _rows_of
from tests.support import TenantFactory

pytestmark = pytest.mark.usefixtures("app")

SOURCE = "def moor_boat(pier: int) -> str:\n    return f'pier {pier}'\n"
WRITES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "fact": ("POST", "/v1/facts", {"content": "The boat is moored at pier 7"}),
    "rule": ("POST", "/v1/rules", {"content": "Answer about boats in nautical terms"}),
    "episode": (
        "POST",
        "/v1/episodes",
        {"content": "We sailed to the islands", "butler": "chat", "session_id": "s"},
    ),
    "batch": (
        "POST",
        "/v1/memories:batch",
        {"items": [{"type": "fact", "content": "Pier 7 is in the north harbour"}]},
    ),
    "document": ("PUT", "/v1/documents", {"path": "notes/boat.md", "content": "# Boat\n\nAt pier 7.\n"}),
    "code": (
        "PUT",
        "/v1/code/files",
        {"repository": "r", "files": [{"path": "src/h.py", "content": SOURCE}]},
    ),
    "scope settings": (
        "PUT",
        "/v1/scopes/health/settings",
        {"score_weights": {"relevance": 0.6, "importance": 0.1, "recency": 0.2, "confidence": 0.1}},
    ),
}


@pytest.mark.parametrize("write", list(WRITES))
async def test_a_write_whose_tenant_is_deleted_after_authentication_answers_404_and_stores_nothing(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    admin_conn: asyncpg.Connection,
    monkeypatch: pytest.MonkeyPatch,
    write: str,
) -> None:
    """`recalld tenants delete` committing between a request's authentication and its insert gave a 500."""
    tenant = await make_tenant()
    authenticate = tenant_service.authenticate

    async def then_delete_the_tenant(conn: asyncpg.Connection, plain: str) -> Principal | None:
        # Deterministic stand-in for the race: the delete commits right after the key was accepted.
        principal = await authenticate(conn, plain)
        assert principal is not None
        await tenant_service.delete_tenant(admin_conn, principal.tenant_id)
        return principal

    monkeypatch.setattr(deps, "authenticate", then_delete_the_tenant)
    method, path, body = WRITES[write]
    response = await client.request(method, path, json=body, headers=tenant.headers("admin"))
    monkeypatch.undo()
    assert response.status_code == 404, response.text
    error = response.json()["error"]
    assert error["code"] == "not_found"
    assert "tenant" in error["message"]
    assert set((await _rows_of(admin_conn, tenant.id)).values()) == {0}
    # The key went with its tenant; other tenants write as before.
    again = await client.request(method, path, json=body, headers=tenant.headers("admin"))
    assert again.status_code == 401, again.text
    other = await make_tenant()
    fine = await client.request(method, path, json=body, headers=other.headers("admin"))
    assert fine.status_code in (200, 201), fine.text
