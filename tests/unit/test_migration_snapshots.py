"""Migrations are snapshots: they import no live app code, and the rules they copied still agree."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from app.retrieval.duplicates import content_key
from app.retrieval.language import dominant_script

VERSIONS = Path(__file__).resolve().parents[2] / "migrations" / "versions"


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", sorted(VERSIONS.glob("*.py")), ids=lambda p: p.stem)
def test_a_migration_imports_no_app_code(path: Path) -> None:
    imported: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            imported.append(node.module or "")
    live = [name for name in imported if name == "app" or name.startswith("app.")]
    assert not live, (
        f"{path.name} imports {live}: a migration is a snapshot, so copy the rule it needs into it "
        "(as 0010_memory_script does) and test the copy against the live one"
    )


@pytest.mark.parametrize(
    "text",
    [
        "where did I park the car",
        "Où est la bibliothèque ? Ça dépend.",
        "ما هي عاصمة المملكة العربية السعودية",
        "北京是中国的首都",
        "Привет, как дела?",
        "서울은 한국의 수도입니다",
        "كيف أستخدم PostgreSQL مع بايثون",
        "Paris est la capitale de la France 法国",
        "ｆｕｌｌｗｉｄｔｈ ｶﾀｶﾅ",
        "1234 + 5678 = ?",
        "",
    ],
)
def test_the_memory_script_migration_derives_what_the_write_path_stores(text: str) -> None:
    migration = _load(VERSIONS / "0010_memory_script.py")
    assert migration._dominant_script(text) == dominant_script(text)


@pytest.mark.parametrize(
    "text",
    [
        "The user likes tea.",
        "  the USER likes   tea  ",
        "Dr. Okafor lives in Augusta…",
        "ﬁne ＡＢＣ!?",
        "",
        "...",
    ],
)
def test_the_truth_migration_keys_rows_as_the_write_path_does(text: str) -> None:
    migration = _load(VERSIONS / "0021_memory_truth.py")
    assert migration._content_key(text) == content_key(text)
