"""`recalld bench --scenario noisy`: what keyword queries that match nothing cost, alone and to others.

A query whose words are in no memory falls through BM25 to the substring (ILIKE) tier. That tier
once scanned the whole tenant; this scenario measures (1) such a query's latency in a tenant of
`size` memories, and (2) another tenant's search p50 idle and while eight clients send such
queries without pause (honouring 429 Retry-After, as a client must).
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import random
import statistics
import string
import time
import urllib.parse
from dataclasses import dataclass

from recalld_tools.evaluation import bench, load_worker
from recalld_tools.evaluation.metrics import summarise

NOISY_CLIENTS = 8


def _nonsense_query(rng: random.Random) -> str:
    # Letters no generated memory contains as a word or substring: every tier runs and finds nothing.
    return " ".join("qz" + "".join(rng.choices(string.ascii_lowercase, k=8)) for _ in range(3))


def _search(
    connection: http.client.HTTPConnection, path: str, key: str, query: str
) -> tuple[int, float, str | None]:
    body = json.dumps({"query": query, "mode": "keyword", "limit": 10})
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    started = time.perf_counter()
    connection.request("POST", path, body, headers)
    response = connection.getresponse()
    response.read()
    return response.status, (time.perf_counter() - started) * 1000, response.getheader("retry-after")


def _noisy_worker(args: tuple[str, str, float, int]) -> tuple[int, int]:
    base_url, key, duration, seed = args
    rng = random.Random(seed)
    path = urllib.parse.urlsplit(base_url).path.rstrip("/") + "/v1/search"
    connection = load_worker.connect(base_url)
    answered = limited = 0
    deadline = time.perf_counter() + duration
    while time.perf_counter() < deadline:
        status, _, retry_after = _search(connection, path, key, _nonsense_query(rng))
        if status == 429:
            limited += 1
            time.sleep(min(float(retry_after or 1), max(deadline - time.perf_counter(), 0)))
        else:
            answered += 1
    connection.close()
    return answered, limited


@dataclass(frozen=True, slots=True)
class NoisyReport:
    """The scenario's numbers."""

    size: int
    alone_p50_ms: float
    alone_p95_ms: float
    victim_idle_p50_ms: float
    victim_loaded_p50_ms: float
    noisy_answered: int
    noisy_limited: int

    def markdown(self) -> str:
        """The result as a markdown table."""
        ratio = self.victim_loaded_p50_ms / self.victim_idle_p50_ms if self.victim_idle_p50_ms else 0.0
        return "\n".join(
            [
                "| tenant size | no-match keyword p50 / p95 ms (alone) | other tenant hybrid p50 idle ms "
                f"| … with {NOISY_CLIENTS} no-match clients ms | ratio | no-match answered / 429 |",
                "| --- | --- | --- | --- | --- | --- |",
                f"| {self.size} | {self.alone_p50_ms:.1f} / {self.alone_p95_ms:.1f} | "
                f"{self.victim_idle_p50_ms:.1f} | {self.victim_loaded_p50_ms:.1f} | {ratio:.2f} | "
                f"{self.noisy_answered} / {self.noisy_limited} |",
            ]
        )


def _alone(base_url: str, key: str, *, requests: int, per_second: float) -> list[float]:
    """Latencies of no-match queries one at a time, paced under the key's rate limit."""
    rng = random.Random(5)
    path = urllib.parse.urlsplit(base_url).path.rstrip("/") + "/v1/search"
    connection = load_worker.connect(base_url)
    latencies = []
    for _ in range(requests):
        status, ms, _ = _search(connection, path, key, _nonsense_query(rng))
        if status == 200:
            latencies.append(ms)
        time.sleep(1 / per_second)
    connection.close()
    return latencies


def run_noisy_bench(
    base_url: str, victim_key: str, noisy_key: str, *, size: int, duration: float, load: bool
) -> NoisyReport:
    """Load both tenants (unless told not to), then measure; the victim's key is the --key given."""
    if load:
        bench.load_corpus(base_url, noisy_key, bench.generate_memories(size, seed=21))
        bench.load_corpus(base_url, victim_key, bench.generate_memories(size, seed=22))
    alone = _alone(base_url, noisy_key, requests=200, per_second=25)
    queries = bench.generate_queries(5000, seed=23)

    def victim_p50(seed: int) -> float:
        result = bench.run_load(
            base_url,
            victim_key,
            scenario="noisy",
            endpoint="search",
            mode="hybrid",
            queries=queries[seed:] + queries[:seed],
            concurrency=1,
            duration_s=duration,
        )
        return result.latency_ms["p50"]

    idle = victim_p50(0)
    context = multiprocessing.get_context("spawn")
    tasks = [(base_url, noisy_key, duration + 4.0, n) for n in range(NOISY_CLIENTS)]
    with context.Pool(NOISY_CLIENTS) as pool:
        noisy = pool.map_async(_noisy_worker, tasks)
        time.sleep(2.0)  # the noisy clients are up and sending
        loaded = victim_p50(1000)
        outcomes = noisy.get()
    return NoisyReport(
        size=size,
        alone_p50_ms=statistics.median(alone),
        alone_p95_ms=summarise(alone)["p95"],
        victim_idle_p50_ms=idle,
        victim_loaded_p50_ms=loaded,
        noisy_answered=sum(a for a, _ in outcomes),
        noisy_limited=sum(limited for _, limited in outcomes),
    )
