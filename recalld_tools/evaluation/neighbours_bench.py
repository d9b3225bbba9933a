"""`recalld bench --scenario neighbours`: does a tenant's latency depend on the other tenants' data?

The same tenant (same memories, same queries) is measured on two servers: one whose memory table
also holds other tenants' rows (`--url`), and one that holds nothing else (`--baseline-url`). The
two are measured alternately, round by round, so both see the same machine load; the report gives
each round's p50, the medians over the rounds and their ratio (crowded / alone).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from recalld_tools.evaluation import bench

# The bench's memory corpus seed: both servers' measured tenants hold the same texts.
CORPUS_SEED = 1


@dataclass(slots=True)
class NeighboursReport:
    """Per-round results of both servers for one mode."""

    mode: str
    crowded: list[bench.LoadResult]
    alone: list[bench.LoadResult]

    def median_p50(self, results: Sequence[bench.LoadResult]) -> float:
        """Median over the rounds of each round's p50."""
        return statistics.median(r.latency_ms["p50"] for r in results)

    @property
    def ratio(self) -> float:
        """Crowded p50 over alone p50 (medians of the rounds)."""
        alone = self.median_p50(self.alone)
        return self.median_p50(self.crowded) / alone if alone else 0.0

    def markdown(self) -> str:
        """Round-by-round table, then the medians and the ratio."""

        def legs(r: bench.LoadResult) -> str:
            return ", ".join(
                f"{leg} {ms:.1f}" for leg, ms in r.server_ms.items() if leg in ("semantic", "keyword")
            )

        lines = [
            f"| round | {self.mode} p50 with neighbours (ms) | {self.mode} p50 alone (ms) | "
            "server-side legs with neighbours | alone |",
            "|---|---|---|---|---|",
        ]
        for n, (c, a) in enumerate(zip(self.crowded, self.alone, strict=True), start=1):
            lines.append(
                f"| {n} | {c.latency_ms['p50']:.1f} | {a.latency_ms['p50']:.1f} | {legs(c)} | {legs(a)} |"
            )
        lines.append(
            f"| **median** | **{self.median_p50(self.crowded):.1f}** | **{self.median_p50(self.alone):.1f}** "
            f"| ratio **{self.ratio:.2f}** | |"
        )
        return "\n".join(lines)


def run_neighbours_bench(
    crowded: tuple[str, str],
    alone: tuple[str, str],
    *,
    size: int,
    load: bool,
    modes: Sequence[str],
    rounds: int,
    duration: float,
    warmup: float,
    seed: int,
) -> list[NeighboursReport]:
    """Load `size` memories into the measured tenant of both servers (unless not `load`), then
    measure each mode `rounds` times on each server, alternating, with fresh queries per round."""
    servers = (crowded, alone)
    if load:
        texts = bench.generate_memories(size, seed=CORPUS_SEED)
        for url, key in servers:
            stats = bench.load_corpus(url, key, texts)
            print(f"{url}: loaded {stats.items} memories in {stats.seconds:.1f}s", flush=True)
    if warmup > 0:
        for url, key in servers:
            # Memory texts, never a query string: the warm-up fills PostgreSQL's buffers, not the
            # query-embedding cache the measured rounds must find cold.
            bench.run_load(
                url,
                key,
                scenario="neighbours",
                endpoint="search",
                mode="hybrid",
                queries=bench.generate_memories(2000, seed=4242),
                concurrency=1,
                duration_s=warmup,
            )
    reports = []
    for m, mode in enumerate(modes):
        report = NeighboursReport(mode, [], [])
        for n in range(rounds):
            # The same fresh queries for both servers in a round: each embeds them once, cold.
            queries = bench.generate_queries(5000, seed=seed * 1000 + m * 100 + n)
            for (url, key), results in zip(servers, (report.crowded, report.alone), strict=True):
                results.append(
                    bench.run_load(
                        url,
                        key,
                        scenario="neighbours",
                        endpoint="recall" if mode == "recall" else "search",
                        mode=mode,
                        queries=queries,
                        concurrency=1,
                        duration_s=duration,
                    )
                )
            print(
                f"{mode} round {n + 1}: with neighbours p50 {report.crowded[-1].latency_ms['p50']:.1f} ms, "
                f"alone {report.alone[-1].latency_ms['p50']:.1f} ms",
                flush=True,
            )
        reports.append(report)
    return reports
