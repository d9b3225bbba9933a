"""A tenant holding one of everything an operator must not lose: facts with a supersedes link and
counted references, a rule, an episode, a document and a code file (written through the API)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support import TenantKeys

DOCUMENT_PATH = "notes/boat.md"
DOCUMENT = (
    "# The boat\n\nThe boat is moored at pier 7.\n\n## Engine\n\nThe outboard engine was serviced in May.\n"
)
CODE_FILES = [
    {"path": "src/harbour.py", "content": "def moor_boat(pier: int) -> str:\n    return f'pier {pier}'\n"},
    {"path": "src/engine.py", "content": "class Engine:\n    def service(self) -> None:\n        pass\n"},
]
QUERIES = ["where is the boat moored", "engine service", "favourite colour", "sailing trip"]


async def fill(client: httpx.AsyncClient, tenant: TenantKeys) -> dict[str, Any]:
    """Write the content; returns the ids of the old and the new fact."""
    headers = tenant.headers()

    async def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await client.post(path, json=body, headers=headers)
        assert response.status_code in (200, 201), response.text
        result: dict[str, Any] = response.json()
        return result

    old = await post("/v1/facts", {"content": "Ana's favourite colour is green", "confidence": 0.8})
    new = await post(
        "/v1/facts", {"content": "Ana's favourite colour is blue", "supersedes": old["id"], "tags": ["ana"]}
    )
    await post("/v1/rules", {"content": "Always answer about boats in nautical terms"})
    await post("/v1/episodes", {"content": "We planned a sailing trip to the islands", "butler": "chat"})
    response = await client.put(
        "/v1/documents", json={"path": DOCUMENT_PATH, "content": DOCUMENT}, headers=headers
    )
    assert response.status_code == 200, response.text
    response = await client.put(
        "/v1/code/files", json={"repository": "harbour", "files": CODE_FILES}, headers=headers
    )
    assert response.status_code == 200, response.text
    for _ in range(2):  # counted references
        response = await client.get(f"/v1/memories/{new['id']}", headers=headers)
        assert response.status_code == 200, response.text
    return {"old": old["id"], "new": new["id"]}


async def snapshot(client: httpx.AsyncClient, tenant: TenantKeys) -> dict[str, Any]:
    """What a user sees of the tenant, without counting it as references: memories, document, code, searches."""
    headers = tenant.headers("reader")
    memories = {}
    for kind in ("fact", "rule", "episode", "document", "code"):
        listing = await client.get("/v1/memories", params={"type": kind, "limit": 100}, headers=headers)
        assert listing.status_code == 200, listing.text
        # effective_confidence decays with the clock: two snapshots a second apart differ there.
        memories[kind] = [
            {k: v for k, v in m.items() if k != "effective_confidence"} for m in listing.json()["items"]
        ]
    document = await client.get("/v1/documents", params={"path": DOCUMENT_PATH}, headers=headers)
    files = await client.get("/v1/code/files", params={"repository": "harbour"}, headers=headers)
    searches = {}
    for query in QUERIES:
        found = await client.post("/v1/search", json={"query": query, "limit": 5}, headers=headers)
        assert found.status_code == 200, found.text
        searches[query] = [(r["content"], r["type"]) for r in found.json()["results"]]
    return {
        "memories": memories,
        "document": document.json().get("content"),
        "code_files": files.json(),
        "searches": searches,
    }
