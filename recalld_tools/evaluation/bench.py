"""`recalld bench`: load a reproducible corpus through the API, then drive search/recall from other processes."""

from __future__ import annotations

import multiprocessing
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from recalld_tools.evaluation import load_worker
from recalld_tools.evaluation.metrics import summarise
from recalld_tools.progress import progress_bar

_SUBJECTS = (
    "The user",
    "Ana",
    "The billing service",
    "Dr. Smith",
    "The on-call engineer",
    "The deploy pipeline",
    "The mobile app",
    "Our landlord",
    "The design team",
    "The search cluster",
    "Grandma",
    "The accountant",
    "The support queue",
    "The nightly backup",
    "The marketing site",
    "The payments API",
    "The cat",
    "Luis",
)
_VERBS = (
    "prefers",
    "needs",
    "reported",
    "scheduled",
    "cancelled",
    "asked about",
    "is allergic to",
    "fixed",
    "is waiting for",
    "recommended",
    "complained about",
    "moved",
    "approved",
    "forgot",
    "renewed",
    "tested",
)
_OBJECTS = (
    "dark roast coffee",
    "the quarterly invoice",
    "a vegetarian menu",
    "the TLS certificate",
    "train tickets",
    "the dentist appointment",
    "the database migration",
    "oat milk",
    "the rollback plan",
    "a new laptop",
    "the insurance renewal",
    "the flaky integration test",
    "a window seat",
    "the memory leak",
    "the garden hose",
    "the API rate limit",
    "a birthday present",
    "the Kubernetes upgrade",
    "gluten-free bread",
    "the VPN config",
)
_WHEN = (
    "on Monday morning",
    "before the Friday release",
    "after lunch",
    "every other week",
    "in December",
    "during the outage",
    "at the Lisbon office",
    "last night",
    "for the next sprint",
    "since the spring",
    "when it rains",
    "ahead of the audit",
    "on the flight to Porto",
    "at 9am sharp",
    "after the reboot",
)
_DETAILS = (
    "and wants a reminder",
    "but only on weekdays",
    "because the old one broke",
    "to save money",
    "as agreed with the team",
    "with a 10% discount",
    "to stay under budget",
    "per the runbook",
    "without telling anyone",
    "for the third time",
    "after reading the postmortem",
    "for safety reasons",
)


def generate_memories(count: int, *, seed: int = 7) -> list[str]:
    """Plausible agent memories, reproducible for a seed and distinct (numbered variants break ties)."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < count:
        text = (
            f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} "
            f"{rng.choice(_WHEN)} {rng.choice(_DETAILS)}"
        )
        if text in seen:
            text = f"{text} (note {len(out)})"
        seen.add(text)
        out.append(text)
    return out


def generate_queries(count: int, *, seed: int = 11) -> list[str]:
    """Distinct short agent-style questions over the same vocabulary (so the embedding cache cannot hide cost)."""
    rng = random.Random(seed)
    templates = (
        "what does {s} think about {o}",
        "{o}",
        "when is {o} {w}",
        "{s} {o}",
        "anything about {o} {w}",
        "{s} {v} {o}",
        "did {s} mention {o} {w}",
        "what did {s} say about {o} {w}",
    )
    out: dict[str, None] = {}
    for _ in range(count * 20):
        if len(out) == count:
            break
        query = rng.choice(templates).format(
            s=rng.choice(_SUBJECTS).lower(),
            v=rng.choice(_VERBS),
            o=rng.choice(_OBJECTS),
            w=rng.choice(_WHEN),
        )
        out[query] = None
    return list(out)


@dataclass(slots=True)
class LoadStats:
    """Ingest throughput."""

    items: int
    seconds: float

    @property
    def per_second(self) -> float:
        """Items written per second."""
        return self.items / self.seconds if self.seconds > 0 else 0.0


def load_corpus(
    base_url: str, api_key: str, texts: Sequence[str], *, batch: int = 500, progress: bool = True
) -> LoadStats:
    """Write texts as facts through POST /v1/memories:batch."""
    started = time.perf_counter()
    headers = {"Authorization": f"Bearer {api_key}"}
    bar = progress_bar(len(texts), "load", enabled=progress)
    with httpx.Client(base_url=base_url, headers=headers, timeout=600) as client:
        for start in range(0, len(texts), batch):
            items = [{"type": "fact", "content": t, "importance": 5} for t in texts[start : start + batch]]
            response = client.post("/v1/memories:batch", json={"items": items})
            response.raise_for_status()
            bar.update(len(items))
    bar.close()
    return LoadStats(len(texts), time.perf_counter() - started)


def key_is_known(base_url: str, api_key: str) -> bool:
    """True unless the server answers 401 to this key (an empty search changes nothing)."""
    headers = {"Authorization": f"Bearer {api_key}"}
    response = httpx.post(
        f"{base_url.rstrip('/')}/v1/search", json={"query": ""}, headers=headers, timeout=30
    )
    return response.status_code != 401


@dataclass(slots=True)
class LoadResult:
    """Latency and throughput of one mode at one concurrency."""

    scenario: str
    label: str
    concurrency: int
    latency_ms: dict[str, float]
    requests: int
    errors: int
    per_second: float
    server_ms: dict[str, float] = field(default_factory=dict)


def run_load(
    base_url: str,
    api_key: str,
    *,
    scenario: str,
    endpoint: str,
    mode: str,
    queries: list[str],
    concurrency: int,
    duration_s: float,
    max_requests: int = 100_000,
    extra: dict[str, Any] | None = None,
    label: str | None = None,
) -> LoadResult:
    """Drive one endpoint/mode from `concurrency` separate processes for `duration_s` seconds."""
    # `extra` is merged into every search body (code search sends `types` and `depth`); `label`
    # names the table row when the mode alone does not say what was measured.
    context = multiprocessing.get_context("spawn")
    tasks = [
        (
            base_url,
            api_key,
            endpoint,
            mode,
            queries,
            duration_s,
            max_requests // concurrency,
            n * 7919,
            extra or {},
        )
        for n in range(concurrency)
    ]
    # Every worker connects, then all (and this clock) start at once: the first ones must not
    # measure while the others are still starting.
    barrier = context.Barrier(concurrency + 1)
    with context.Pool(concurrency, initializer=load_worker.start_together, initargs=(barrier,)) as pool:
        pending = pool.map_async(load_worker.worker, tasks, chunksize=1)
        barrier.wait()
        started = time.perf_counter()
        outcomes = pending.get()
    wall = time.perf_counter() - started
    latencies = [ms for lat, _, _ in outcomes for ms in lat]
    errors = sum(e for _, e, _ in outcomes)
    legs: dict[str, list[float]] = {}
    for _, _, leg_times in outcomes:
        for leg, values in leg_times.items():
            legs.setdefault(leg, []).extend(values)
    label = label or (mode if endpoint == "search" else "recall")
    return LoadResult(
        scenario=scenario,
        label=label,
        concurrency=concurrency,
        latency_ms=summarise(latencies),
        requests=len(latencies),
        errors=errors,
        per_second=len(latencies) / min(wall, duration_s) if latencies else 0.0,
        server_ms={leg: statistics.median(v) for leg, v in sorted(legs.items())},
    )


def recall_against_exact(base_url: str, api_key: str, queries: Sequence[str], *, k: int = 10) -> float:
    """Mean overlap@k of the service's semantic results with an exact vector scan of the same tenant."""
    headers = {"Authorization": f"Bearer {api_key}"}
    overlaps = []
    with httpx.Client(base_url=base_url, headers=headers, timeout=60) as client:
        for query in queries:
            body = {"query": query, "mode": "semantic", "limit": k, "min_score": 0, "min_confidence": 0}
            approx = client.post("/v1/search", json=body).json()["results"]
            exact = client.post("/v1/search", json={**body, "exact": True}).json()["results"]
            truth = {r["id"] for r in exact}
            if truth:
                overlaps.append(len(truth & {r["id"] for r in approx}) / len(truth))
    return sum(overlaps) / len(overlaps) if overlaps else 0.0


def format_results(results: Sequence[LoadResult]) -> str:
    """Markdown table of load results."""
    lines = [
        "| scenario | mode | concurrency | p50 ms | p95 ms | p99 ms | req/s | errors | server-side medians (ms) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        server = ", ".join(f"{leg} {ms:.1f}" for leg, ms in r.server_ms.items())
        lines.append(
            f"| {r.scenario} | {r.label} | {r.concurrency} | {r.latency_ms['p50']:.1f} | {r.latency_ms['p95']:.1f} "
            f"| {r.latency_ms['p99']:.1f} | {r.per_second:.0f} | {r.errors} | {server} |"
        )
    return "\n".join(lines)
