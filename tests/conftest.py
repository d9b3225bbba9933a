"""Test selection: tests/unit is marked `unit`; `pytest -m unit` does not even import tests/integration.

The database, model and server fixtures live in tests/integration/conftest.py, so a unit test
cannot start them (it would fail with "fixture not found"); shared helpers are in tests/support.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

UNIT = Path(__file__).parent / "unit"
INTEGRATION = Path(__file__).parent / "integration"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With `-m unit` alone, the integration modules (torch, playwright, the app) are not imported."""
    if config.getoption("markexpr") == "unit" and (
        collection_path == INTEGRATION or INTEGRATION in collection_path.parents
    ):
        return True
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/unit carries the `unit` marker."""
    for item in items:
        if UNIT in item.path.parents:
            item.add_marker(pytest.mark.unit)
