"""/docs, /redoc and /console in a real browser (Debian's chromium driven by Playwright).

The server is `recalld serve` with the real MiniLM model and its own embedded PostgreSQL; every
request to another host is aborted and recorded, so "works offline" is what the tests check.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest
from playwright.sync_api import Browser, Page, Route, expect, sync_playwright

from tests.support import ROOT, free_port, wait_ready

CHROMIUM = os.environ.get("RECALLD_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# Without the networking flags Chromium phones home at start, which a closed network refuses.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(tempfile.gettempdir()) / "recalld-browser"
# On a shared two-core machine ReDoc can take longer than expect()'s default 5 s to render the spec.
expect.set_options(timeout=30_000)
PEANUTS = "The user is allergic to peanuts and always carries an epinephrine pen"
AISLE = "Always book an aisle seat on flights longer than three hours"


@dataclass(frozen=True, slots=True)
class Server:
    """A running `recalld serve` and keys of two tenants."""

    url: str
    admin: str  # default tenant
    writer: str  # default tenant
    outsider: str  # reader of another tenant


def _cli(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _output(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return out.strip()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    data_dir = Path(tempfile.mkdtemp(prefix="rb-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "RECALLD_EMBEDDING_PROVIDER"}}
    env.update(RECALLD_DATA_DIR=str(data_dir), HF_HUB_OFFLINE="1")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_ready(port, process)
        # The CLI calls start in parallel where they can: each one is a whole interpreter start.
        tenant = _cli(env, "tenants", "create", "outsiders")
        writer = _cli(env, "keys", "create", "--tenant", "default", "--role", "writer")
        _output(tenant)
        outsider = _cli(env, "keys", "create", "--tenant", "outsiders", "--role", "reader")
        yield Server(
            url=f"http://127.0.0.1:{port}",
            admin=(data_dir / "admin.key").read_text().strip(),
            writer=_output(writer),
            outsider=_output(outsider),
        )
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        pid_file = data_dir / "pg" / "postmaster.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text().split()[0])
            if psutil.pid_exists(pid):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"no chromium at {CHROMIUM}: install it (Debian: apt-get install chromium) "
            "or point RECALLD_CHROMIUM at one; ./dev.sh test installs it when it may",
            pytrace=False,
        )
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@dataclass
class Tab:
    """A page whose requests to any host but the server are aborted and listed in `external`."""

    page: Page
    external: list[str] = field(default_factory=list)


@pytest.fixture
def tab(browser: Browser, server: Server) -> Iterator[Tab]:
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    context.set_default_timeout(30_000)
    opened = Tab(context.new_page())

    def only_this_server(route: Route) -> None:
        url = route.request.url
        if url == server.url or url.startswith(f"{server.url}/") or url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            opened.external.append(url)
            route.abort()

    context.route("**/*", only_this_server)
    yield opened
    context.close()


def _use_key(page: Page, key: str) -> None:
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Use key").click()
    expect(page.locator("#key-status")).to_contain_text("Using key rk_")


def _search(page: Page, query: str) -> None:
    page.get_by_role("tab", name="Search").click()
    page.get_by_label("Query").fill(query)
    page.get_by_role("button", name="Search", exact=True).click()
    expect(page.locator("#search-status")).to_contain_text("result")


def test_docs_render_offline_and_try_it_out_works_with_a_bearer_key(tab: Tab, server: Server) -> None:
    page = tab.page
    page.goto(f"{server.url}/docs")
    operation = page.locator("#operations-retrieval-memory_search")
    expect(operation).to_be_visible()
    ids = page.locator(".opblock-summary-operation-id").all_inner_texts()
    assert {"memory_search", "memory_recall", "memory_list", "memory_store_fact"} <= set(ids)

    page.get_by_role("button", name="Authorize").first.click()
    page.locator("#auth-bearer-value").fill(server.writer)
    page.get_by_role("button", name="Apply credentials").click()
    page.get_by_role("button", name="Close").click()
    operation.locator(".opblock-summary").click()
    operation.get_by_role("button", name="Try it out").click()
    operation.get_by_role("button", name="Execute").click()
    status = operation.locator(".live-responses-table .response .response-col_status")
    expect(status).to_have_text("200")
    assert (
        '"keyword_ranker": "bm25"'
        in operation.locator(".live-responses-table .microlight").first.inner_text()
    )
    assert tab.external == []


def test_redoc_renders_offline(tab: Tab, server: Server) -> None:
    page = tab.page
    page.goto(f"{server.url}/redoc")
    expect(page.get_by_role("heading", name="Search memories (hybrid, semantic or keyword)")).to_be_visible()
    assert tab.external == []


def test_console_stores_searches_and_explains_the_first_result_within_its_tenant(
    tab: Tab, server: Server
) -> None:
    page = tab.page
    page.goto(f"{server.url}/console")
    _use_key(page, server.writer)
    page.get_by_role("tab", name="Browse").click()
    for kind, content, scope in (("fact", PEANUTS, "health"), ("rule", AISLE, "travel")):
        page.locator("#store-type").select_option(kind)
        page.locator("#store-scope").fill(scope)
        page.get_by_label("Content").fill(content)
        page.get_by_role("button", name="Store").click()
        expect(page.locator("#store-status")).to_contain_text(f"Stored {kind}")
        expect(page.locator("#detail .content")).to_have_text(content)

    _search(page, "peanut allergy")
    first = page.locator("#results > li").first
    expect(first.locator(".content")).to_have_text(PEANUTS)
    marks = first.locator("mark").all_inner_texts()
    assert marks == ["peanuts"]  # "allergy" and "allergic" stem differently: no span
    breakdown = first.locator(".breakdown")
    labels = breakdown.locator(".bar-label").all_inner_texts()
    # The calibrated score (issue 23) is drawn beside the adaptive score it was calibrated from.
    assert labels == [
        "score",
        "fused (adaptive)",
        "adaptive, before calibration",
        "keyword",
        "semantic",
        "decay",
    ]
    widths = [
        float(w)
        for w in breakdown.locator(".bar-fill").evaluate_all(
            "bars => bars.map(b => b.getBoundingClientRect().width)"
        )
    ]
    assert len(widths) == 6 and all(w > 0 for w in widths)
    expect(breakdown).to_contain_text("rank 1")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "console-search.png"), full_page=True)

    # Another tenant's key: the same search and listing find nothing of the first tenant.
    _use_key(page, server.outsider)
    _search(page, "peanut allergy")
    expect(page.locator("#search-status")).to_contain_text("0 results")
    assert page.locator("#results > li").count() == 0
    page.get_by_role("tab", name="Browse").click()
    page.get_by_role("button", name="List").click()
    expect(page.locator("#browse-caption")).to_have_text("0 facts shown, newest first.")
    assert tab.external == []


def test_a_key_pasted_into_the_field_is_used_without_clicking_use_key(tab: Tab, server: Server) -> None:
    stored = httpx.post(
        f"{server.url}/v1/facts",
        json={"content": "The pasted-key heron nests by the mill", "scope": "pasted"},
        headers={"Authorization": f"Bearer {server.writer}"},
    )
    assert stored.status_code == 201
    page = tab.page
    page.goto(f"{server.url}/console")
    expect(page.locator("#key-status")).to_have_text("No key yet: kept in this tab only.")
    page.get_by_label("API key").fill(server.writer)  # pasted; "Use key" is never clicked
    _search(page, "pasted-key heron")
    expect(page.locator("#results > li").first.locator(".content")).to_have_text(
        "The pasted-key heron nests by the mill"
    )
    expect(page.get_by_role("alert")).to_be_hidden()
    expect(page.locator("#key-status")).to_contain_text("Using key rk_")
    expect(page.get_by_label("API key")).to_have_value("")  # the secret does not stay on screen
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "console-pasted-key.png"), full_page=True)


def test_a_bad_key_shows_the_apis_401_message(tab: Tab, server: Server) -> None:
    page = tab.page
    page.goto(f"{server.url}/console")
    _use_key(page, "rk_00000000_not-a-real-key")
    page.get_by_label("Query").fill("anything")
    page.get_by_role("button", name="Search", exact=True).click()
    alert = page.get_by_role("alert")
    expect(alert).to_have_text(
        "The API did not accept the key (401 unauthorized): invalid or revoked API key"
    )


def test_console_browses_opens_forgets_and_edits_scope_settings(tab: Tab, server: Server) -> None:
    headers = {"Authorization": f"Bearer {server.writer}"}
    stored = httpx.post(
        f"{server.url}/v1/facts",
        json={"content": "The spare key is under the blue flowerpot", "scope": "house", "importance": 7},
        headers=headers,
    )
    assert stored.status_code == 201
    memory_id = stored.json()["id"]
    page = tab.page
    page.goto(f"{server.url}/console")
    _use_key(page, server.writer)
    page.get_by_role("tab", name="Browse").click()
    page.locator("#browse-scope").fill("house")
    page.get_by_role("button", name="List").click()
    row = page.locator("#browse-rows tr")
    expect(row).to_have_count(1)
    row.get_by_role("button", name="Open").click()
    detail = page.locator("#detail")
    expect(detail.locator(".content")).to_have_text("The spare key is under the blue flowerpot")
    fields = dict(
        zip(detail.locator("dt").all_inner_texts(), detail.locator("dd").all_inner_texts(), strict=True)
    )
    assert fields["id"] == memory_id and fields["importance"] == "7" and fields["validity"] == "active"
    page.once("dialog", lambda dialog: dialog.accept())
    detail.get_by_role("button", name="Forget this memory").click()
    expect(detail).to_have_text(f"Forgot memory {memory_id}.")
    expect(row).to_have_count(0)
    assert httpx.get(f"{server.url}/v1/memories/{memory_id}", headers=headers).status_code == 404

    page.get_by_role("tab", name="Scope settings").click()
    page.locator("#scope-name").fill("house")
    page.get_by_role("button", name="Load").click()
    expect(page.locator("#scope-status")).to_have_text("Loaded settings of scope house.")
    settings = page.get_by_label("Settings (JSON; saving needs an admin key)")
    expect(settings).to_have_value("{}")
    settings.fill('{"fusion": "weighted", "half_life_days": 30}')
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("alert")).to_contain_text(
        "This key's role may not do that (403 forbidden): this operation needs the admin role"
    )
    _use_key(page, server.admin)
    settings.fill('{"fusion": "fastest"}')
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("alert")).to_contain_text("Invalid input (422 validation_error)")
    expect(page.get_by_role("alert")).to_contain_text("fusion: String should match pattern")
    settings.fill('{"fusion": "weighted", "half_life_days": 30}')
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#scope-status")).to_have_text("Saved settings of scope house.")
    expect(page.get_by_role("alert")).to_be_hidden()
    saved = httpx.get(f"{server.url}/v1/scopes/house/settings", headers=headers).json()
    assert saved == {"fusion": "weighted", "half_life_days": 30.0}
    assert tab.external == []


def test_console_says_a_repeat_is_a_duplicate_and_shows_a_facts_history(tab: Tab, server: Server) -> None:
    headers = {"Authorization": f"Bearer {server.writer}"}
    slot = {"subject": "user", "predicate": "lives_in", "scope": "moves", "supersede": "subject_predicate"}
    old = httpx.post(
        f"{server.url}/v1/facts", json={"content": "The user lives in Lisbon", **slot}, headers=headers
    )
    new = httpx.post(
        f"{server.url}/v1/facts", json={"content": "The user lives in Porto", **slot}, headers=headers
    )
    assert old.status_code == new.status_code == 201 and new.json()["superseded"] == [old.json()["id"]]
    page = tab.page
    page.goto(f"{server.url}/console")
    _use_key(page, server.writer)
    page.get_by_role("tab", name="Browse").click()
    page.locator("#store-scope").fill("moves")
    page.get_by_label("Content").fill("the user's dentist is Dr. Okafor.")
    page.get_by_role("button", name="Store").click()
    expect(page.locator("#store-status")).to_contain_text("Stored fact")
    page.get_by_label("Content").fill("The user's dentist is dr. okafor")
    page.get_by_role("button", name="Store").click()
    expect(page.locator("#store-status")).to_contain_text("(duplicate, confirmed)")

    page.locator("#browse-scope").fill("moves")
    page.get_by_role("button", name="List").click()
    rows = page.locator("#browse-rows tr")
    expect(rows).to_have_count(3)
    expect(page.locator("#browse-rows")).to_contain_text("[superseded] The user lives in Lisbon")
    page.locator(f'#browse-rows tr[data-id="{new.json()["id"]}"]').get_by_role("button", name="Open").click()
    page.locator("#detail").get_by_role("button", name="History").click()
    chain = page.locator("#history > li")
    expect(chain).to_have_count(2)
    assert [chain.nth(i).get_attribute("data-id") for i in range(2)] == [new.json()["id"], old.json()["id"]]
    expect(chain.nth(1)).to_contain_text("superseded")
    assert tab.external == []
