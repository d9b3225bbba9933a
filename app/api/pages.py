"""Pages for people: the OpenAPI docs (Swagger UI, ReDoc) and the memory console, all served locally.

Nothing these pages load comes from another host: the Swagger UI and ReDoc bundles are the files
the fastapi-offline package ships, and the console is plain HTML, CSS and one ES module under
app/console. Air-gapped machines get working pages instead of a blank one waiting on a CDN.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

DOCS_ASSETS_URL = "/docs-assets"
CONSOLE_URL = "/console"
CONSOLE_DIR = Path(str(files("app") / "console"))
_DOCS_DIR = Path(str(files("fastapi_offline") / "static"))

# Every page may load from this origin only, so nothing it shows can make the browser reach another
# host. For ReDoc this is also what stops its sidebar logo, a hard-coded image on a public CDN.
_SAME_ORIGIN = "default-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'"
# Swagger UI starts from an inline script and ReDoc injects its styles: both need 'unsafe-inline'.
_DOCS_POLICY = f"{_SAME_ORIGIN}; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'"
_REDOC_POLICY = f"{_SAME_ORIGIN}; style-src 'self' 'unsafe-inline'; font-src 'self' data:; worker-src blob:"
# The console has no inline code at all and sends no forms anywhere.
_CONSOLE_HEADERS = {
    "Content-Security-Policy": f"{_SAME_ORIGIN}; base-uri 'none'; form-action 'none'",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def install_pages(app: FastAPI) -> None:
    """Serve /docs, /redoc and /console from files installed with recalld."""
    app.mount(DOCS_ASSETS_URL, StaticFiles(directory=_DOCS_DIR), name="docs-assets")
    # Registered before the console's static mount so that /console itself is the page.
    app.add_api_route(CONSOLE_URL, console_page, methods=["GET"], include_in_schema=False)
    app.add_api_route(f"{CONSOLE_URL}/", console_slash, methods=["GET"], include_in_schema=False)
    app.mount(CONSOLE_URL, StaticFiles(directory=CONSOLE_DIR), name="console")

    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} – API docs",
            swagger_js_url=f"{root}{DOCS_ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{DOCS_ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{DOCS_ASSETS_URL}/favicon.png",
            # Operation ids are the MCP tool names; the key is not persisted (it would go to localStorage).
            swagger_ui_parameters={"displayOperationId": True},
        )
        page.headers["Content-Security-Policy"] = _DOCS_POLICY
        return page

    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} – API reference",
            redoc_js_url=f"{root}{DOCS_ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{DOCS_ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )
        page.headers["Content-Security-Policy"] = _REDOC_POLICY
        return page

    app.add_api_route("/docs", swagger_ui, methods=["GET"], include_in_schema=False)
    app.add_api_route("/redoc", redoc, methods=["GET"], include_in_schema=False)


async def console_page() -> FileResponse:
    """The console's single page."""
    return FileResponse(CONSOLE_DIR / "index.html", media_type="text/html", headers=_CONSOLE_HEADERS)


async def console_slash(request: Request) -> RedirectResponse:
    """/console/ → /console, where the page's relative asset and API URLs resolve."""
    return RedirectResponse(f"{request.scope.get('root_path', '')}{CONSOLE_URL}")
