"""schemathesis against a real `recalld serve`: every operation, generated inputs, writer and admin keys.

No answer may be a 5xx, and every answer must be a status code the OpenAPI document lists for the
operation with a body matching its schema. Bounded to about two minutes (examples per operation).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance, status_code_conformance
from schemathesis.generation.case import Case
from schemathesis.schemas import APIOperation

from tests.integration.test_cli_serve import _env, _recalld
from tests.support import ROOT, free_port, wait_ready

EXAMPLES_PER_OPERATION = 25
FULL_CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]


class LiveServer:
    """A recalld process on a fresh data directory, with a writer and an admin key."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        env = _env(data_dir)
        # The fuzzer sends far more than an agent would; the rate limit has its own tests.
        env["RECALLD_RATE_LIMIT_PER_SECOND"] = "0"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(self.port)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        wait_ready(self.port, self.process)
        self.url = f"http://127.0.0.1:{self.port}"
        self.writer = self._key("writer")
        self.admin = self._key("admin")

    def _key(self, role: str) -> str:
        created = _recalld(self.data_dir, "keys", "create", "--tenant", "default", "--role", role)
        assert created.returncode == 0, created.stderr
        return created.stdout.strip()

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(10)
        pid_file = self.data_dir / "pg" / "postmaster.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text().split()[0])
            if psutil.pid_exists(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def live_server() -> Iterator[LiveServer]:
    data_dir = Path(tempfile.mkdtemp(prefix="rs-", dir="/tmp"))
    server = LiveServer(data_dir)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def _exercise(operation: APIOperation[Any, Any, Any, Any], server: LiveServer) -> None:
    """Generated requests for one operation, each sent with the writer and the admin key."""
    # /mcp is the MCP SDK's transport (JSON-RPC inside): only the 5xx check applies to it.
    checks = [not_a_server_error] if operation.path == "/mcp" else FULL_CHECKS

    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def run(case: Case[Any]) -> None:
        for key in (server.writer, server.admin):
            case.call_and_validate(
                base_url=server.url, headers={"Authorization": f"Bearer {key}"}, checks=checks
            )

    run()


def test_every_operation_keeps_its_contract(live_server: LiveServer) -> None:
    api = schemathesis.openapi.from_url(f"{live_server.url}/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]  # type: ignore[union-attr]
    assert len(operations) >= 20
    failures: list[str] = []
    for operation in operations:
        try:
            _exercise(operation, live_server)
        except Exception as exc:  # one report listing every operation that broke its contract
            failures.append(f"{operation.label}: {exc}")
    assert not failures, "\n\n".join(failures)
