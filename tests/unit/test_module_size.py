"""No module of the server or of its client tools grows past 400 lines: one that does has more than one job."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 400
# Over the limit for now, each with the reason; a waiver goes as soon as its module fits.
WAIVED = {
    "recalld_tools/evaluation/runner.py": "moved as it was (issue 27); the evaluation sets are split out next",
}


def _line_count(path: Path) -> int:
    # As `wc -l` counts them.
    return path.read_bytes().count(b"\n")


def _sizes() -> dict[str, int]:
    paths = sorted(path for package in ("app", "recalld_tools") for path in (ROOT / package).rglob("*.py"))
    return {path.relative_to(ROOT).as_posix(): _line_count(path) for path in paths}


def test_no_module_over_the_limit() -> None:
    over = {name: lines for name, lines in _sizes().items() if lines > MAX_LINES and name not in WAIVED}
    assert not over, f"split these modules along their responsibilities (at most {MAX_LINES} lines): {over}"


def test_every_waiver_is_still_needed() -> None:
    sizes = _sizes()
    stale = [name for name in WAIVED if sizes.get(name, 0) <= MAX_LINES]
    assert not stale, f"these modules fit now; drop their waiver: {stale}"
