"""What can be checked of the container setup without a Docker engine."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from app.cli import build_parser
from app.infra.db import SERVING_ROLE

ROOT = Path(__file__).resolve().parents[2]


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def test_compose_has_database_with_healthcheck_and_api_depending_on_it() -> None:
    services = _compose()["services"]
    db = services["db"]
    assert db["image"] == "pgvector/pgvector:pg17"
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    assert any(v.startswith("pgdata:") for v in db["volumes"])
    api = services["api"]
    assert api["depends_on"]["db"]["condition"] == "service_healthy"
    assert api["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert api["environment"]["DATABASE_URL"].startswith("postgresql://")
    assert set(_compose()["volumes"]) >= {"pgdata", "recalld-data"}


def test_compose_serves_as_the_serving_role_and_migrates_as_the_owner() -> None:
    services = _compose()["services"]
    owner = services["db"]["environment"]["POSTGRES_USER"]
    serving = urlsplit(services["api"]["environment"]["DATABASE_URL"])
    migrate = services["migrate"]["environment"]
    assert serving.username == SERVING_ROLE != owner
    assert "RECALLD_MIGRATION_DATABASE_URL" not in services["api"]["environment"]
    assert urlsplit(migrate["RECALLD_MIGRATION_DATABASE_URL"]).username == owner
    # migrate gives the serving role exactly the password the api logs in with.
    assert migrate["RECALLD_SERVING_PASSWORD"] == serving.password
    assert urlsplit(migrate["DATABASE_URL"]).username == SERVING_ROLE
    # The index maintainer builds DDL as the owner, against the database the api serves.
    maintainer = services["vector-indexes"]["environment"]
    assert urlsplit(maintainer["RECALLD_MIGRATION_DATABASE_URL"]).username == owner
    assert maintainer["DATABASE_URL"] == services["api"]["environment"]["DATABASE_URL"]


def test_compose_and_dockerfile_commands_exist_in_the_cli() -> None:
    parser = build_parser()
    for name in ("api", "migrate", "vector-indexes"):
        args = parser.parse_args(_compose()["services"][name]["command"])
        assert callable(args.handler)
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r'^ENTRYPOINT \["recalld"\]$', dockerfile, re.M)
    assert re.search(r'^CMD \["serve"\]$', dockerfile, re.M)
    assert re.search(r"^USER recalld$", dockerfile, re.M)
    assert "python:3.12-slim" in dockerfile
    assert "download.pytorch.org/whl/cpu" in dockerfile


def test_files_the_dockerfile_copies_exist_and_script_is_declared() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for line in dockerfile.splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), source
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["recalld"] == "app.cli:main"


def test_test_only_packages_stay_out_of_the_runtime_dependencies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {re.split(r"[<>=\[ ]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
    dev = {re.split(r"[<>=\[ ]", d, maxsplit=1)[0].lower() for d in project["optional-dependencies"]["dev"]}
    assert "pyyaml" in dev and "import-linter" in dev
    assert not runtime & {"pyyaml", "pytest", "mypy", "ruff", "import-linter"}


def test_docker_build_context_leaves_out_the_venv_and_local_data() -> None:
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".venv", ".git", ".data"} <= ignored
    dockerfile = (ROOT / "Dockerfile").read_text()
    copied = {
        source
        for line in dockerfile.splitlines()
        if line.startswith("COPY ")
        for source in line.split()[1:-1]
    }
    assert not copied & ignored


def test_compose_api_listens_on_all_interfaces_and_data_persists() -> None:
    api = _compose()["services"]["api"]
    command = api["command"]
    assert command[0] == "serve" and command[command.index("--host") + 1] == "0.0.0.0"
    assert "8080:8080" in api["ports"]
    assert "recalld-data:/data" in api["volumes"]
    assert _compose()["services"]["migrate"]["command"] == ["migrate"]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"^(\./dev\.sh test)\s+#", readme, re.M)
    assert match is not None
    commands = [
        line
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line and not line.startswith(("#", "set ", "cd "))
    ]
    assert commands == [f"exec {match.group(1)}"]


def test_wheel_carries_the_console_docs_pages_and_client_tools(tmp_path: Path) -> None:
    # Built from a copy, so the build leaves nothing in the work tree.
    source = tmp_path / "src"
    for package in ("app", "recalld_tools"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("recalld-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    console = {f"app/console/{p.name}" for p in (ROOT / "app" / "console").iterdir()}
    assert "app/console/index.html" in console
    assert console | {"app/api/pages.py"} <= names
    # `recalld eval`, `bench` and `index` run the client tools, a package of their own.
    assert {"recalld_tools/evaluation/runner.py", "recalld_tools/upload/indexer.py"} <= names
