"""`recalld bench --scenario scale`: one tenant grown step by step, latency measured at each size.

At each size one search mode (keyword unless --stability-mode says otherwise) is timed twice: within seconds of the last batch (before
autovacuum could refresh any statistics) and a minute later, so a plan that depends on fresh
statistics shows as a ratio. Then every requested mode runs at every concurrency, and the growth
factor of keyword p50 from the smallest to the largest size is printed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from recalld_tools.evaluation.bench import (
    LoadResult,
    format_results,
    generate_memories,
    generate_queries,
    load_corpus,
    run_load,
)

# Long enough for a p50, short enough to end before autovacuum's first visit (~1 minute).
RIGHT_AFTER_SECONDS = 4.0


def _keyword_p50(results: Sequence[LoadResult], scenario: str) -> float | None:
    for r in results:
        if r.scenario == scenario and r.label == "keyword" and r.concurrency == 1:
            return r.latency_ms["p50"]
    return None


def run_scale_bench(
    base_url: str,
    api_key: str,
    *,
    sizes: Sequence[int],
    modes: Sequence[str],
    concurrency: Sequence[int],
    duration_s: float,
    settle_s: float = 60.0,
    seed: int = 1,
    stability_mode: str = "keyword",
) -> list[LoadResult]:
    """Grow the key's tenant to each size in turn (batch endpoint) and measure; prints as it goes.

    stability_mode is the search mode timed right after each load and a minute later.
    """
    ordered = sorted(sizes)
    texts = generate_memories(ordered[-1], seed=1)
    loaded = 0
    results: list[LoadResult] = []
    stability: list[str] = []
    for size in ordered:
        stats = load_corpus(base_url, api_key, texts[loaded:size], batch=1000)
        loaded = size
        print(
            f"{size}: loaded {stats.items} more in {stats.seconds:.1f}s ({stats.per_second:.0f}/s)",
            flush=True,
        )
        scenario = f"scale {size:,}"
        timed: list[LoadResult] = []
        for label in (f"{stability_mode}, right after the load", f"{stability_mode}, a minute later"):
            if timed:
                time.sleep(settle_s)
            timed.append(
                run_load(
                    base_url,
                    api_key,
                    scenario=scenario,
                    endpoint="search",
                    mode=stability_mode,
                    queries=generate_queries(3000, seed=seed * 1000 + size % 997 + len(timed)),
                    concurrency=1,
                    duration_s=RIGHT_AFTER_SECONDS,
                    label=label,
                )
            )
        results += timed
        ratio = timed[0].latency_ms["p50"] / max(timed[1].latency_ms["p50"], 1e-9)
        stability.append(
            f"{size:,}: {stability_mode} p50 right after the load {timed[0].latency_ms['p50']:.1f} ms, "
            f"a minute later {timed[1].latency_ms['p50']:.1f} ms (×{ratio:.2f})"
        )
        for run, (c, mode) in enumerate((c, m) for c in concurrency for m in modes):
            results.append(
                run_load(
                    base_url,
                    api_key,
                    scenario=scenario,
                    endpoint="recall" if mode == "recall" else "search",
                    mode=mode,
                    queries=generate_queries(5000, seed=seed * 100 + run),
                    concurrency=c,
                    duration_s=duration_s,
                )
            )
            print(format_results(results[-1:]).splitlines()[-1], flush=True)
    print()
    print(format_results(results))
    print()
    print("\n".join(stability))
    first, last = (
        _keyword_p50(results, f"scale {ordered[0]:,}"),
        _keyword_p50(results, f"scale {ordered[-1]:,}"),
    )
    if first and last and len(ordered) > 1:
        print(f"keyword p50 growth {ordered[0]:,} → {ordered[-1]:,}: ×{last / first:.2f}")
    return results
