"""No module of the server or of its client tools grows past 400 lines: one that does has more than one job."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 400


def test_no_module_over_the_limit() -> None:
    paths = sorted(path for package in ("app", "recalld_tools") for path in (ROOT / package).rglob("*.py"))
    # Lines as `wc -l` counts them.
    sizes = {path.relative_to(ROOT).as_posix(): path.read_bytes().count(b"\n") for path in paths}
    over = {name: lines for name, lines in sizes.items() if lines > MAX_LINES}
    assert not over, f"split these modules along their responsibilities (at most {MAX_LINES} lines): {over}"
