"""The bench's corpora and queries: reproducible, distinct, and about the loaded material (no database)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from recalld_tools.evaluation import bench
from recalld_tools.evaluation.code_bench import (
    CodeBenchError,
    generate_code_queries,
    run_code_bench,
    scan_corpus,
)

FIXTURE = Path(__file__).parent / "fixtures" / "swift-auth"


def test_memory_corpus_is_reproducible_and_distinct() -> None:
    first = bench.generate_memories(3000, seed=1)
    assert first == bench.generate_memories(3000, seed=1)
    assert len(set(first)) == 3000
    assert first != bench.generate_memories(3000, seed=2)


def test_query_sets_of_different_seeds_do_not_overlap_much() -> None:
    # Within a run every query is new to the embedding cache; across runs the shared vocabulary
    # repeats some, which is why measured runs restart the server (docs/benchmarks.md).
    a = bench.generate_queries(5000, seed=1000)
    b = bench.generate_queries(1000, seed=1100)
    assert len(set(a)) == 5000
    assert len(set(a[:1000]) & set(b)) < 300


def test_code_queries_name_the_corpus_symbols() -> None:
    corpus = scan_corpus([FIXTURE], ["swift-auth"])
    assert corpus.files == 6
    names = {s.name for s in corpus.symbols}
    assert {"AuthProtocol", "login"} <= names
    queries = generate_code_queries(corpus.symbols, 40, seed=3)
    assert queries == generate_code_queries(corpus.symbols, 40, seed=3)
    assert len(set(queries)) == len(queries)
    assert any("login" in q or "auth" in q.lower() for q in queries)


def test_code_bench_refuses_unknown_modes_and_missing_folders() -> None:
    with pytest.raises(CodeBenchError, match="unknown code mode"):
        run_code_bench("http://127.0.0.1:9", "k", [str(FIXTURE)], ["semantic"], [1], 1.0, True)
    with pytest.raises(CodeBenchError, match="not a directory"):
        run_code_bench("http://127.0.0.1:9", "k", ["/nonexistent/src"], None, [1], 1.0, True)


def test_bench_refuses_unknown_modes_before_sending_anything() -> None:
    # Port 9 has no server: reaching it would fail differently.
    command = [
        "bench",
        "--url",
        "http://127.0.0.1:9",
        "--key",
        "k",
        "--skip-load",
        "--modes",
        "hybrid",
        "multi-hop",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", *command],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert (
        done.stderr == "recalld: unknown mode(s) multi-hop; choose from keyword, semantic, hybrid, recall\n"
    )
