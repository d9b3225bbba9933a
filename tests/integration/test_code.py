"""Code index over HTTP: symbol search, globs, multi-hop, code_research, isolation (real DB and MiniLM)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import TenantFactory, TenantKeys, search

FIXTURE = Path(__file__).parent / "fixtures" / "swift-auth"


def _files() -> list[dict[str, str]]:
    return [
        {"path": p.relative_to(FIXTURE).as_posix(), "content": p.read_text()}
        for p in sorted(FIXTURE.rglob("*.swift"))
    ]


async def _index(
    client: httpx.AsyncClient, tenant: TenantKeys, repository: str = "ios-app"
) -> dict[str, Any]:
    response = await client.put(
        "/v1/code/files", json={"repository": repository, "files": _files()}, headers=tenant.headers()
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def _search(client: httpx.AsyncClient, tenant: TenantKeys, **body: Any) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = (
        await search(client, tenant, **{"types": ["code"], "limit": 20, **body})
    )["results"]
    return results


async def _research(client: httpx.AsyncClient, tenant: TenantKeys, **body: Any) -> dict[str, Any]:
    response = await client.post("/v1/code/research", json=body, headers=tenant.headers("reader"))
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


@pytest.fixture
async def indexed(client: httpx.AsyncClient, make_tenant: TenantFactory) -> TenantKeys:
    tenant = await make_tenant("code")
    await _index(client, tenant)
    return tenant


async def test_indexing_counts_and_skips_unchanged(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant("code")
    first = await _index(client, tenant)
    assert first["files"] == 6 and first["skipped"] == 0
    assert first["chunks"] >= 15 and first["symbols"] >= 12 and first["edges"] >= 10
    again = await _index(client, tenant)
    assert again["files"] == 0 and again["skipped"] == 6 and again["embedded"] == 0
    listing = await client.get("/v1/code/files", params={"repository": "ios-app"}, headers=tenant.headers())
    assert len(listing.json()["files"]) == 6
    bad = await client.put(
        "/v1/code/files",
        json={"repository": "ios-app", "files": [{"path": "../x.swift", "content": "func a() {}"}]},
        headers=tenant.headers(),
    )
    assert bad.status_code == 422


async def test_symbol_search_for_function_and_class(client: httpx.AsyncClient, indexed: TenantKeys) -> None:
    function = await _search(client, indexed, query="", symbol="hashPassword")
    assert function[0]["symbol"] == "hashPassword"
    assert function[0]["match_type"] == "symbol"
    assert function[0]["path"] == "Sources/Auth/Hashing.swift"
    assert (function[0]["start_line"], function[0]["end_line"]) == (4, 8)
    klass = await _search(client, indexed, query="", symbol="AuthService")
    assert (klass[0]["symbol"], klass[0]["symbol_kind"]) == ("AuthService", "class")
    members = {r["symbol"] for r in klass if r.get("parent_symbol") == "AuthService"}
    assert members >= {"login", "logout", "validateCredentials", "changePassword", "init"}
    struct = await _search(client, indexed, query="", symbol="TokenStore")
    kinds = {(r["symbol"], r["symbol_kind"]) for r in struct}
    assert ("TokenStore", "extension") in kinds and ("login", "method") in kinds
    with_words = await _search(client, indexed, query="sign in with password", symbol="validateCredentials")
    assert with_words[0]["symbol"] == "validateCredentials"


async def test_exact_symbol_matches_pass_any_score_floor(
    client: httpx.AsyncClient, indexed: TenantKeys
) -> None:
    # Words about nothing in the code and a floor above a member's score (0.9): the calibrated
    # relevance of the words drops every fused hit, never what the symbol names.
    results = await _search(
        client, indexed, query="quantum chromodynamics lattice", symbol="AuthService", min_score=0.95
    )
    assert results[0]["symbol"] == "AuthService"
    members = {r["symbol"] for r in results if r.get("parent_symbol") == "AuthService"}
    assert {"login", "changePassword"} <= members
    assert {r["match_type"] for r in results} == {"symbol"}


async def test_path_filters(client: httpx.AsyncClient, indexed: TenantKeys) -> None:
    auth_only = await _search(client, indexed, query="login", file_filter="Sources/Auth/**")
    assert auth_only and all(r["path"].startswith("Sources/Auth/") for r in auth_only)
    swift = await _search(client, indexed, query="login", file_filter="*.swift")
    assert {r["path"] for r in swift} >= {
        "Tests/AuthTests/AuthServiceTests.swift",
        "Sources/Auth/AuthService.swift",
    }
    no_tests = await _search(client, indexed, query="login", exclude_filter="**/Tests/**")
    assert no_tests and not any("Tests/" in r["path"] for r in no_tests)
    none = await _search(client, indexed, query="login", file_filter="*.go")
    assert none == []


async def test_keyword_search_splits_identifiers(client: httpx.AsyncClient, indexed: TenantKeys) -> None:
    hits = await _search(client, indexed, query="validate credentials", mode="keyword")
    assert hits[0]["symbol"] == "validateCredentials"


async def test_multi_hop_depth(client: httpx.AsyncClient, indexed: TenantKeys) -> None:
    base = {"query": "", "symbol": "login", "exclude_filter": "**/Tests/**"}
    one = await _search(client, indexed, depth=1, **base)
    reached_one = {r["symbol"]: r for r in one if r["match_type"] == "multi-hop"}
    assert "validateCredentials" in reached_one and reached_one["validateCredentials"]["hop_depth"] == 1
    assert "hashPassword" not in {r["symbol"] for r in one}
    two = await _search(client, indexed, depth=2, **base)
    reached_two = {r["symbol"]: r for r in two if r["match_type"] == "multi-hop"}
    assert reached_two["hashPassword"]["hop_depth"] == 2
    assert reached_two["validateCredentials"]["hop_depth"] == 1


async def test_chunk_reached_twice_appears_once_with_combined_signal(
    client: httpx.AsyncClient, indexed: TenantKeys
) -> None:
    results = await _search(
        client, indexed, query="", symbol="AuthService", depth=1, file_filter="Sources/**"
    )
    ids = [r["id"] for r in results]
    assert len(ids) == len(set(ids))
    hashing = [r for r in results if r["symbol"] == "hashPassword"]
    assert len(hashing) == 1
    paths = hashing[0]["score_breakdown"]["paths"]
    assert len(paths) == 2, results  # from validateCredentials and from changePassword
    single = 0.9 * 0.5  # a member's score passed on through one hop
    assert hashing[0]["score"] == pytest.approx(1 - (1 - single) ** 2, abs=1e-6), [
        (r["symbol"], r["score"], r["match_type"]) for r in results
    ]


async def test_research_implementations_and_callers(client: httpx.AsyncClient, indexed: TenantKeys) -> None:
    impls = await _research(client, indexed, query="implementations of AuthProtocol")
    assert impls["kind"] == "implementations"
    found = {(i["symbol"], i["via"]) for i in impls["items"]}
    assert ("AuthService", "declaration") in found
    assert ("TokenStore", "extension") in found
    callers = await _research(client, indexed, query="what calls login()")
    assert callers["kind"] == "callers" and callers["symbol"] == "login"
    by_symbol = {i["symbol"]: i for i in callers["items"] if i["depth"] == 1}
    assert set(by_symbol) == {"didTapSignIn", "testLoginRejectsWrongPassword"}
    assert by_symbol["didTapSignIn"]["path"] == "Sources/App/LoginViewController.swift"
    assert by_symbol["didTapSignIn"]["line"] == 13
    assert by_symbol["testLoginRejectsWrongPassword"]["path"] == "Tests/AuthTests/AuthServiceTests.swift"
    assert by_symbol["testLoginRejectsWrongPassword"]["line"] == 7
    chain = await _research(client, indexed, kind="callers", symbol="hashPassword", depth=3)
    chains = [i["chain"] for i in chain["items"]]
    assert ["login", "validateCredentials", "hashPassword"] in chains
    callees = await _research(client, indexed, query="what does validateCredentials call")
    assert {i["symbol"] for i in callees["items"]} == {"hashPassword"}
    deps = await _research(client, indexed, query="dependencies of module Auth")
    imported = {d["import"] for d in deps["items"] if d["relation"] == "imports"}
    assert {"Foundation", "CryptoKit"} <= imported
    importers = {d["module"] for d in deps["items"] if d["relation"] == "imported_by"}
    assert "Tests/AuthTests" in importers
    unknown = await client.post(
        "/v1/code/research", json={"query": "make me a sandwich"}, headers=indexed.headers("reader")
    )
    assert unknown.status_code == 422


async def test_code_is_isolated_between_tenants_and_repositories(
    client: httpx.AsyncClient, indexed: TenantKeys, make_tenant: TenantFactory
) -> None:
    other = await make_tenant("code")
    assert await _search(client, other, query="login", symbol="login") == []
    assert (await _research(client, other, query="what calls login"))["items"] == []
    listing = await client.get("/v1/code/files", params={"repository": "ios-app"}, headers=other.headers())
    assert listing.json()["files"] == []
    await client.put(
        "/v1/code/files",
        json={
            "repository": "web",
            "files": [{"path": "src/auth.py", "content": "def login():\n    audit()\n"}],
        },
        headers=indexed.headers(),
    )
    web_only = await _research(client, indexed, kind="callers", symbol="audit", repository="web")
    assert [i["symbol"] for i in web_only["items"]] == ["login"]
    ios_only = await _research(client, indexed, kind="callers", symbol="audit", repository="ios-app")
    assert ios_only["items"] == []
    scoped = await _search(client, indexed, query="login", repository="web")
    assert {r["repository"] for r in scoped} == {"web"}
    deleted = await client.delete(
        "/v1/code/files", params={"repository": "web", "path": "src/auth.py"}, headers=indexed.headers()
    )
    assert deleted.status_code == 204
    assert await _search(client, indexed, query="audit", repository="web") == []
