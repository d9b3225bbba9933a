"""No module of the server, its client tools or the Python client grows past 400 lines: one that does has more than one job."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 400
# The server, its command-line tools, and the Python client (its own distribution, same rule).
PACKAGES = ("app", "recalld_tools", "clients/python/src")


def test_no_module_over_the_limit() -> None:
    paths = sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))
    # Lines as `wc -l` counts them.
    sizes = {path.relative_to(ROOT).as_posix(): path.read_bytes().count(b"\n") for path in paths}
    over = {name: lines for name, lines in sizes.items() if lines > MAX_LINES}
    assert not over, f"split these modules along their responsibilities (at most {MAX_LINES} lines): {over}"
