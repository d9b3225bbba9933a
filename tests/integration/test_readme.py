"""The README as a new user reads it: its API table is the running service's, its examples run."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from app.api.mcp_tools import TOOLS

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TABLE_START, TABLE_END = (
    "<!-- api-table: generated from /openapi.json by tests/integration/test_readme.py -->",
    "<!-- /api-table -->",
)
README_URL = "http://127.0.0.1:8080"
# Not keyed, so not MCP tools: who may call them.
UNKEYED = {"healthz": "none", "readyz": "none", "metrics": "none", "mcp": "any key (per tool)"}
# Keyed, but not MCP tools: the tenant export is a stream for `recalld import`, not a tool result.
NOT_TOOLS = {"tenant_export": "admin"}


def api_table(doc: dict[str, Any]) -> str:
    """The README's API table for this OpenAPI document: one row per operation, in the document's order."""
    rows = [
        "| Operation | Operation id (= MCP tool) | Role | MCP toolset | What it does |",
        "|---|---|---|---|---|",
    ]
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            query = [p["name"] for p in operation.get("parameters", []) if p["in"] == "query"]
            target = f"{method.upper()} {path}" + (
                "?" + "&".join(f"{name}=" for name in query) if query else ""
            )
            name = operation["operationId"]
            tool = TOOLS.get(name)
            role, toolset = (tool.role, f"`{tool.toolset}`") if tool else ({**UNKEYED, **NOT_TOOLS}[name], "")
            tool_name = f"`{name}`" if tool else ""
            rows.append(f"| `{target}` | {tool_name} | {role} | {toolset} | {operation['summary']} |")
    return "\n".join(rows)


def _readme_table() -> str:
    text = README.read_text()
    assert TABLE_START in text and TABLE_END in text, "README.md lost the API table's markers"
    return text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip()


def test_the_api_table_is_the_services_operations() -> None:
    from app.infra.config import Settings
    from app.main import create_app

    # The OpenAPI document is built from the routes alone: no database, no lifespan needed.
    doc = create_app(Settings(data_dir=Path(tempfile.gettempdir()) / "recalld-readme")).openapi()
    expected = api_table(doc)
    assert _readme_table() == expected, (
        "README.md's API table disagrees with the service; replace the lines between its markers with:\n"
        + expected
    )


# Examples: every ```bash block of the README that calls the API is run, command by command.
_FENCE = re.compile(r"```bash\n(.*?)```", re.DOTALL)
# `"field": value` in a comment under a command: some object in its JSON answer has exactly that.
_FRAGMENT = re.compile(r'"([A-Za-z_]+)": ("(?:[^"\\]|\\.)*"|-?[0-9]+(?:\.[0-9]+)?|true|false|null)')


def _examples() -> list[tuple[str, list[str]]]:
    """(command, comment lines under it) of every command in the README's API-calling bash blocks."""
    found: list[tuple[str, list[str]]] = []
    for block in _FENCE.findall(README.read_text()):
        if "curl " not in block:
            continue
        command: list[str] = []
        comments: list[str] | None = None  # those of the block's last command
        for line in block.splitlines():
            if line.startswith("#") and comments is not None and not command:
                comments.append(line)
            elif line.strip() and not line.startswith("#"):
                command.append(line.rstrip("\\").rstrip())
                if not line.endswith("\\"):
                    comments = []
                    found.append((" ".join(part.strip() for part in command), comments))
                    command = []
    return found


def _has(value: Any, key: str, expected: Any) -> bool:
    if isinstance(value, dict):
        return (key in value and value[key] == expected) or any(
            _has(v, key, expected) for v in value.values()
        )
    if isinstance(value, list):
        return any(_has(item, key, expected) for item in value)
    return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def home() -> Iterator[Path]:
    """A fresh home directory, so the README's `~/.local/share/recalld` is a new data directory."""
    path = Path(tempfile.mkdtemp(prefix="rr-", dir="/tmp"))
    yield path
    pid_file = path / ".local/share/recalld/pg/postmaster.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text().split()[0])
        if psutil.pid_exists(pid):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def test_the_readme_examples_run_against_a_live_server(home: Path) -> None:
    examples = _examples()
    assert len(examples) >= 8, "the README's examples were not found"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALLD_") and k != "DATABASE_URL"}
    # Not about semantics: keyword-only keeps the start fast (the examples' answers are all keyword matches).
    env.update(HOME=str(home), RECALLD_EMBEDDING_PROVIDER="none", HF_HUB_OFFLINE="1")
    server = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, "recalld serve exited"
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "recalld did not become ready"
            time.sleep(0.3)
        for command, comments in examples:
            _run(command, comments, url, env)
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def _run(command: str, comments: list[str], url: str, env: dict[str, str]) -> None:
    line = command.replace(README_URL, url).replace(".venv/bin/recalld", f"{sys.executable} -m app.cli")
    assignment = re.fullmatch(r"([A-Z_]+)=(.*)", line)
    if assignment:
        name, value = assignment.groups()
        out = subprocess.run(["bash", "-c", f"printf %s {value}"], env=env, capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout, f"{command}: {out.stderr}"
        env[name] = out.stdout
        return
    is_curl = line.startswith("curl ")
    if is_curl:
        line += " -w '\\n%{http_code}'"
    done = subprocess.run(
        ["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{command}\n{done.stderr}"
    if not is_curl:
        return
    body, _, status = done.stdout.rpartition("\n")
    assert status.startswith("2"), f"{command}\nanswered {status}: {body}"
    answer = json.loads(body) if body else None
    for comment in comments:
        for key, value in _FRAGMENT.findall(comment):
            assert _has(answer, key, json.loads(value)), f"{command}\nhas no {key}: {value} in {body}"
