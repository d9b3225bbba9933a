"""The pages people open (/docs, /redoc, /console) over plain HTTP; tests/test_browser.py renders them."""

from __future__ import annotations

import re

import httpx

URL_IN_PAGE = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|\burl:\s*['"]([^'"]+)['"]""")


def _page_urls(html: str) -> list[str]:
    return [a or b for a, b in URL_IN_PAGE.findall(html)]


async def test_docs_pages_load_every_asset_from_this_server(client: httpx.AsyncClient) -> None:
    for page in ("/docs", "/redoc"):
        response = await client.get(page)
        assert response.status_code == 200, page
        urls = _page_urls(response.text)
        assert urls, page
        assert [u for u in urls if re.match(r"(https?:)?//", u)] == [], page
        for url in urls:
            asset = await client.get(url)
            assert asset.status_code == 200, url
            assert len(asset.content) > 1000, url
    script = await client.get("/docs-assets/swagger-ui-bundle.js")
    assert script.headers["content-type"].startswith(("text/javascript", "application/javascript"))


async def test_openapi_offers_a_bearer_key_on_every_keyed_operation(client: httpx.AsyncClient) -> None:
    doc = (await client.get("/openapi.json")).json()
    schemes = doc["components"]["securitySchemes"]
    assert list(schemes.values()) == [{**schemes["apiKey"], "type": "http", "scheme": "bearer"}]
    for path, operations in doc["paths"].items():
        for operation in operations.values():
            keyed = path.startswith("/v1/") or path == "/mcp"
            expected: list[dict[str, list[str]]] | None = [{"apiKey": []}] if keyed else None
            assert operation.get("security") == expected, path
    assert "/console" not in doc["paths"] and "/docs" not in doc["paths"]


async def test_console_is_served_with_its_assets_and_a_same_origin_policy(client: httpx.AsyncClient) -> None:
    page = await client.get("/console")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "connect-src 'self'" in policy
    assert page.headers["cache-control"] == "no-store"
    urls = _page_urls(page.text)
    assert {"console/console.js", "console/console.css"} <= set(urls)
    for url in ("/console/console.js", "/console/console.css"):
        asset = await client.get(url)
        assert asset.status_code == 200 and asset.text.strip(), url
    slash = await client.get("/console/")
    assert (slash.status_code, slash.headers["location"]) == (307, "/console")
