"""One rule each for paths, suffixes and globs: what a user sees through search, uploads and `recalld index`."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from app.retrieval.globs import glob_to_regex, path_matches
from recalld_tools.upload.code_indexer import source_files
from tests.support import TenantFactory

# Each `**/` once stood for its own `(.*/)?`: 22 of them backtracked for minutes on a miss.
PATHOLOGICAL_GLOBS = ["**/" * 22 + "x", "a/**/" * 99 + "b"]  # the second: 496 characters
LONG_PATH = "a/" * 250 + "c"


def _matches_within(glob: str, path: str, seconds: float) -> bool:
    """Compile and match in a child process: a backtracking blow-up holds the GIL, so no thread could stop it."""
    code = (
        "import sys\n"
        "from app.retrieval.globs import glob_to_regex, path_matches\n"
        "path_matches(glob_to_regex(sys.argv[1]), sys.argv[2])\n"
    )
    try:
        subprocess.run([sys.executable, "-c", code, glob, path], check=True, timeout=seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


def test_globs_follow_gitignore_semantics() -> None:
    github = glob_to_regex(".github/**")
    assert path_matches(github, ".github/workflows/ci.yml")
    assert not path_matches(github, "github/workflows/ci.yml")
    char_class = glob_to_regex("[ab].py")
    assert path_matches(char_class, "a.py") and path_matches(char_class, "src/b.py")
    assert not path_matches(char_class, "c.py") and not path_matches(char_class, "[ab].py")
    tests = glob_to_regex("**/Tests/**")
    assert path_matches(tests, "Tests/A.swift") and path_matches(tests, "Pkg/Tests/B.swift")
    assert not path_matches(tests, "Sources/A.swift")
    swift = glob_to_regex("*.swift")
    assert path_matches(swift, "Sources/Auth/Auth.swift") and not path_matches(swift, "Auth.go")


def test_pathological_globs_match_in_linear_time() -> None:
    for glob in PATHOLOGICAL_GLOBS:
        assert len(glob) >= 66
        # A generous bound, not a benchmark: the backtracking matcher this replaced took minutes.
        assert _matches_within(glob, LONG_PATH, seconds=20.0), glob


async def test_pathological_glob_filter_answers_promptly(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant("glob")
    files = [{"path": LONG_PATH[:400] + ".py", "content": "def login():\n    return 1\n"}]
    put = await client.put(
        "/v1/code/files", json={"repository": "r", "files": files}, headers=tenant.headers()
    )
    assert put.status_code == 200, put.text
    for glob in PATHOLOGICAL_GLOBS:
        for field in ("file_filter", "exclude_filter"):
            response = await asyncio.wait_for(
                client.post(
                    "/v1/search",
                    json={"query": "login", "types": ["code"], field: glob, "symbol": "login", "depth": 1},
                    headers=tenant.headers("reader"),
                ),
                timeout=30,
            )
            assert response.status_code == 200, response.text


async def test_invalid_glob_is_a_422(client: httpx.AsyncClient, make_tenant: TenantFactory) -> None:
    tenant = await make_tenant("glob")
    for glob in ("[z-a].py", "!x.py", "#comment"):
        response = await client.post(
            "/v1/search", json={"query": "x", "file_filter": glob}, headers=tenant.headers("reader")
        )
        assert response.status_code == 422, (glob, response.text)
        assert response.json()["error"]["message"].startswith("file_filter:")


async def test_a_glob_ending_in_a_backslash_is_a_422_over_rest_and_mcp(
    client: httpx.AsyncClient, make_tenant: TenantFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """pathspec's own error for a trailing backslash escaped as a 500 (MCP: internal_error)."""
    tenant = await make_tenant("glob")
    mcp_headers = {
        **tenant.headers("reader"),
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    for glob in ("\\", "a\\", "*\\", "src/x\\\\\\"):
        for field in ("file_filter", "exclude_filter"):
            body = {"query": "login", field: glob}
            response = await client.post("/v1/search", json=body, headers=tenant.headers("reader"))
            assert response.status_code == 422, (glob, response.text)
            assert response.json()["error"]["message"].startswith(f"{field}:")
            assert "backslash" in response.json()["error"]["message"]
            call = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "memory_search", "arguments": body},
            }
            answer = await client.post("/mcp", json=call, headers=mcp_headers)
            assert answer.status_code == 200, answer.text
            error = json.loads(answer.json()["result"]["content"][0]["text"])["error"]
            assert error["code"] == "validation_error", error
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    escaped = await client.post(
        "/v1/search", json={"query": "x", "file_filter": "a\\\\"}, headers=tenant.headers("reader")
    )
    assert escaped.status_code == 200, escaped.text


async def test_code_and_document_paths_share_one_strict_rule(
    client: httpx.AsyncClient, make_tenant: TenantFactory
) -> None:
    tenant = await make_tenant("paths")
    for bad in ("src/a\nb.py", "src/a\rb.py", "src/a\tb.py", "../a.py", "/a.py", "a//b.py", "a\\b.py"):
        code = await client.put(
            "/v1/code/files",
            json={"repository": "r", "files": [{"path": bad, "content": "x = 1\n"}]},
            headers=tenant.headers(),
        )
        assert code.status_code == 422, (bad, code.text)
        doc = await client.put(
            "/v1/documents",
            json={"path": bad.replace(".py", ".md"), "content": "x"},
            headers=tenant.headers(),
        )
        assert doc.status_code == 422, (bad, doc.text)
    listed = await client.get("/v1/code/files", params={"repository": "r"}, headers=tenant.headers("reader"))
    assert listed.json()["files"] == []


def test_index_uploads_every_suffix_the_server_parses(tmp_path: Path) -> None:
    for name in ("a.py", "b.pyi", "c.ts", "d.mts", "e.cts", "f.swift", "g.go", "h.mjs", "notes.md", "x.rb"):
        (tmp_path / name).write_text("x\n")
    assert [p.name for p in source_files(tmp_path)] == [
        "a.py",
        "b.pyi",
        "c.ts",
        "d.mts",
        "e.cts",
        "f.swift",
        "g.go",
        "h.mjs",
    ]
