"""`recalld bench --scenario code`: index real source through the API, then time code search over HTTP.

The corpus is the source of installed packages (or folders given on the command line), read in
sorted order, so two machines with the same package versions load the same chunks. Queries are
the corpus's own identifiers, as agents type them and as questions in words.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.ingest.code_model import split_identifier
from app.ingest.code_parser import parse_code
from recalld_tools.evaluation.bench import LoadResult, format_results, run_load
from recalld_tools.upload.code_indexer import CodeIndexStats, index_code, source_files

# Ordered small to large; together about 20,000 chunks, of which SQLAlchemy alone is over half.
DEFAULT_PACKAGES = ("httpx", "starlette", "fastapi", "pydantic", "alembic", "sqlalchemy")
# What each mode adds to the search body; issue 7's targets are for these two.
CODE_MODES: dict[str, dict[str, Any]] = {
    "hybrid": {"types": ["code"]},
    "multi-hop": {"types": ["code"], "depth": 2},
}
MIN_CHUNKS = 10_000
_QUERY_KINDS = ("function", "method", "class", "struct", "enum", "protocol", "interface", "type")
_TEMPLATES = (
    "{name}",
    "{words}",
    "where is {words} implemented",
    "how does {owner} {words}",
    "what does {name} do",
    "{words} in {repository}",
    "{owner}.{name}",
    "code that handles {words}",
)


class CodeBenchError(Exception):
    """The corpus cannot be found or loaded; reported without a traceback."""


@dataclass(frozen=True, slots=True)
class CorpusSymbol:
    """A declared function, method or type of the corpus, the material of queries."""

    repository: str
    name: str
    parent: str | None


@dataclass(slots=True)
class Corpus:
    """The source folders, what the server's parser makes of them, and where they came from."""

    roots: list[Path]
    labels: list[str]
    files: int = 0
    chunks: int = 0
    symbols: list[CorpusSymbol] = field(default_factory=list)


def package_dirs(names: Sequence[str]) -> tuple[list[Path], list[str]]:
    """Source folders of installed packages, with 'name version' labels, in the given order."""
    roots: list[Path] = []
    labels: list[str] = []
    for name in names:
        spec = importlib.util.find_spec(name)
        locations = list(spec.submodule_search_locations or []) if spec else []
        if not locations:
            raise CodeBenchError(f"package {name!r} is not installed (or is not a folder of source)")
        roots.append(Path(locations[0]))
        labels.append(f"{name} {_version(name)}")
    return roots, labels


def _version(module: str) -> str:
    distributions = importlib.metadata.packages_distributions().get(module, [module])
    try:
        return importlib.metadata.version(distributions[0])
    except importlib.metadata.PackageNotFoundError:
        return "unknown version"


def scan_corpus(roots: list[Path], labels: list[str]) -> Corpus:
    """Parse the corpus locally with the server's parser: chunk counts and the symbols to query."""
    corpus = Corpus(roots, labels)
    for root in roots:
        repository = root.resolve().name
        # The files `recalld index --code` uploads, so the local parse matches the server's.
        for path in source_files(root):
            rel = path.relative_to(root).as_posix()
            chunks = parse_code(rel, path.read_text(errors="replace"))
            corpus.files += 1
            corpus.chunks += len(chunks)
            corpus.symbols.extend(
                CorpusSymbol(repository, c.symbol, c.parent_symbol)
                for c in chunks
                if c.symbol and c.symbol_kind in _QUERY_KINDS and not c.symbol.startswith("_")
            )
    return corpus


def load_corpus(base_url: str, api_key: str, corpus: Corpus) -> list[CodeIndexStats]:
    """Upload every root through PUT /v1/code/files (unchanged files are skipped by the server)."""
    headers = {"Authorization": f"Bearer {api_key}"}
    results = []
    with httpx.Client(base_url=base_url, headers=headers, timeout=600) as client:
        for root, label in zip(corpus.roots, corpus.labels, strict=True):
            stats = index_code(client, root, repository=root.resolve().name, progress=False)
            if stats.failed:
                raise CodeBenchError(f"loading {label} failed: {'; '.join(stats.errors[:3])}")
            print(f"{label}: {stats.summary()}", flush=True)
            results.append(stats)
    return results


def generate_code_queries(symbols: Sequence[CorpusSymbol], count: int, *, seed: int) -> list[str]:
    """Distinct identifier and natural-language queries about the corpus's own symbols."""
    rng = random.Random(seed)
    pool = sorted({(s.repository, s.name, s.parent or "") for s in symbols})
    out: dict[str, None] = {}
    for _ in range(count * 20):
        if len(out) == count or not pool:
            break
        repository, name, parent = rng.choice(pool)
        template = rng.choice(_TEMPLATES)
        if "{owner}" in template and not parent:
            continue
        words = " ".join(split_identifier(name))
        query = template.format(name=name, words=words, owner=parent, repository=repository)
        out[query] = None
    return list(out)


def run_code_bench(
    base_url: str,
    api_key: str,
    code_dirs: Sequence[str],
    modes: Sequence[str] | None,
    concurrency: Sequence[int],
    duration_s: float,
    skip_load: bool,
    seed: int = 20,
) -> list[LoadResult]:
    """Load the corpus (unless skip_load), then time each code mode at each concurrency; prints the table."""
    modes = list(modes or CODE_MODES)
    unknown = sorted(set(modes) - set(CODE_MODES))
    if unknown:
        raise CodeBenchError(
            f"unknown code mode(s) {', '.join(unknown)}; choose from {', '.join(CODE_MODES)}"
        )
    if code_dirs:
        roots = [Path(d) for d in code_dirs]
        missing = [str(r) for r in roots if not r.is_dir()]
        if missing:
            raise CodeBenchError(f"not a directory: {', '.join(missing)}")
        labels = [r.resolve().name for r in roots]
    else:
        roots, labels = package_dirs(DEFAULT_PACKAGES)
    corpus = scan_corpus(roots, labels)
    print(f"corpus: {', '.join(labels)}: {corpus.files} files, {corpus.chunks} chunks", flush=True)
    if corpus.chunks < MIN_CHUNKS:
        print(f"note: fewer than {MIN_CHUNKS} chunks; issue 7's targets are stated for {MIN_CHUNKS}+")
    if not skip_load:
        load_corpus(base_url, api_key, corpus)
    results = []
    runs = [(c, m) for c in concurrency for m in modes]
    for run, (workers, mode) in enumerate(runs):
        # Fresh queries per run: a mode must not be measured on embeddings another one cached.
        queries = generate_code_queries(corpus.symbols, 5000, seed=seed * 100 + run)
        results.append(
            run_load(
                base_url,
                api_key,
                scenario="code",
                endpoint="search",
                mode="hybrid",
                queries=queries,
                concurrency=workers,
                duration_s=duration_s,
                extra=CODE_MODES[mode],
                label=mode,
            )
        )
        print(format_results(results[-1:]).splitlines()[-1], flush=True)
    print()
    print(format_results(results))
    return results
