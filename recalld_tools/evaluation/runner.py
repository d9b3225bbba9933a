"""`recalld eval`: load evaluation sets through the write API, ask every query per mode and fusion, report."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from recalld_tools.evaluation.abstention import Probe
from recalld_tools.evaluation.metrics import mrr_at_k, ndcg_at_k, recall_at_k, summarise
from recalld_tools.evaluation.sets import EvalQuery, EvalSet, SetKind
from recalld_tools.progress import progress_bar

# Deep enough for every fusion experiment over the legs; the API's largest limit.
DUMP_DEPTH = 100
WRITE_BATCH = 256


@dataclass(frozen=True, slots=True)
class Run:
    """A search configuration to measure: mode, and fusion (None: the service's default)."""

    mode: str
    fusion: str | None = None

    @property
    def label(self) -> str:
        """keyword, semantic, hybrid rrf, hybrid (default)…"""
        if self.mode != "hybrid":
            return self.mode
        return f"hybrid {self.fusion}" if self.fusion else "hybrid (default)"

    @classmethod
    def parse(cls, text: str) -> Run:
        """`keyword`, `semantic`, `hybrid` (default fusion) or `hybrid:<fusion>`."""
        mode, _, fusion = text.partition(":")
        if mode not in ("keyword", "semantic", "hybrid") or (fusion and mode != "hybrid"):
            raise ValueError(f"unknown run {text!r}: keyword, semantic, hybrid or hybrid:<fusion>")
        return cls(mode, fusion or None)


DEFAULT_RUNS = ("keyword", "semantic", "hybrid:rrf", "hybrid:weighted", "hybrid")


@dataclass(slots=True)
class RunResult:
    """Quality and latency of one run over one set."""

    run: Run
    ndcg10: float
    recall5: float
    recall10: float
    mrr10: float
    latency_ms: dict[str, float]
    recall10_by_category: dict[str, float] = field(default_factory=dict)

    def headline(self, kind: SetKind) -> float:
        """The set's headline metric for this run."""
        return self.ndcg10 if kind == "beir" else self.recall10


@dataclass(slots=True)
class SetReport:
    """One set's results for every run."""

    eval_set: EvalSet
    ingest_seconds: float
    keyword_ranker: str
    results: list[RunResult] = field(default_factory=list)
    # Share of top-10 positions where the keyword leg's (pruned) ranking equals exact BM25's.
    keyword_agreement: float | None = None

    def markdown(self) -> str:
        """The set's table: one row per run."""
        s = self.eval_set
        categories = sorted({c for r in self.results for c in r.recall10_by_category})
        lines = [
            f"### {s.name} ({s.kind}): {len(s.items)} memories, {len(s.queries)} queries, "
            f"keyword ranker {self.keyword_ranker}, load {self.ingest_seconds:.1f}s",
            "",
            "| run | nDCG@10 | R@5 | R@10 | MRR@10 |"
            + "".join(f" R@10 cat {c} |" for c in categories)
            + " p50 ms |",
            "|---|---|---|---|---|" + "---|" * len(categories) + "---|",
        ]
        for r in self.results:
            lines.append(
                f"| {r.run.label} | {r.ndcg10:.3f} | {r.recall5:.3f} | {r.recall10:.3f} | {r.mrr10:.3f} |"
                + "".join(f" {r.recall10_by_category.get(c, 0.0):.3f} |" for c in categories)
                + f" {r.latency_ms['p50']:.1f} |"
            )
        if self.keyword_agreement is not None:
            lines += ["", f"keyword top-10 positions equal to exact BM25: {self.keyword_agreement:.3f}"]
        return "\n".join(lines)


def summary_markdown(reports: Sequence[SetReport]) -> str:
    """One table over every set: a row per run, each set's headline metric in its column."""
    runs = list(dict.fromkeys(r.run for report in reports for r in report.results))
    lines = [
        "| run | " + " | ".join(f"{rep.eval_set.name} {rep.eval_set.metric}" for rep in reports) + " |",
        "|---|" + "---|" * len(reports),
    ]
    for run in runs:
        cells = []
        for rep in reports:
            found = [r for r in rep.results if r.run == run]
            cells.append(f"{found[0].headline(rep.eval_set.kind):.3f}" if found else "–")
        lines.append(f"| {run.label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


async def ingest(client: httpx.AsyncClient, eval_set: EvalSet, *, progress: bool = True) -> float:
    """Write every item (idempotent: a reused database only replays keys); returns seconds taken.

    A set stored as another set's memories writes nothing: that set, loaded first, wrote them.
    """
    started = time.perf_counter()
    if eval_set.stored_as is not None:
        return 0.0
    items = eval_set.items
    bar = progress_bar(len(items), f"load {eval_set.name}", enabled=progress)
    for start in range(0, len(items), WRITE_BATCH):
        batch = items[start : start + WRITE_BATCH]
        response = await client.post("/v1/memories:batch", json={"items": batch})
        response.raise_for_status()
        bar.update(len(batch))
    bar.close()
    return time.perf_counter() - started


async def _search(
    client: httpx.AsyncClient, query: EvalQuery, run: Run, limit: int, *, exact: bool = False
) -> tuple[list[dict[str, Any]], str, float]:
    body: dict[str, Any] = {
        "query": query.text,
        "mode": run.mode,
        "limit": limit,
        "min_score": 0,
        "min_confidence": 0,
    }
    if exact:
        body["exact"] = True
    if run.fusion:
        body["fusion"] = run.fusion
    if query.scope:
        body["scope"] = query.scope
    started = time.perf_counter()
    response = await client.post("/v1/search", json=body)
    elapsed = (time.perf_counter() - started) * 1000
    response.raise_for_status()
    payload = response.json()
    return payload["results"], str(payload["keyword_ranker"]), elapsed


def _eval_id(result: dict[str, Any]) -> str:
    return str(result["metadata"].get("eval_id", ""))


async def evaluate(
    client: httpx.AsyncClient,
    eval_set: EvalSet,
    runs: Sequence[Run],
    *,
    limit: int = 10,
    progress: bool = True,
) -> tuple[list[RunResult], str]:
    """Ask every query in every run; returns per-run results and the keyword ranker in use."""
    results = []
    ranker = "unknown"
    for run in runs:
        ndcg, r5, r10, mrr, latencies = [], [], [], [], []
        by_category: dict[str, list[float]] = {}
        bar = progress_bar(len(eval_set.queries), f"{eval_set.name} {run.label}", enabled=progress)
        for query in eval_set.queries:
            found, ranker, elapsed = await _search(client, query, run, limit)
            latencies.append(elapsed)
            ranked = list(dict.fromkeys(_eval_id(r) for r in found))
            ndcg.append(ndcg_at_k(ranked, query.relevance, 10))
            r5.append(recall_at_k(ranked, query.relevance, 5))
            r10.append(recall_at_k(ranked, query.relevance, 10))
            mrr.append(mrr_at_k(ranked, query.relevance, 10))
            if query.category is not None:
                by_category.setdefault(query.category, []).append(r10[-1])
            bar.update()
        bar.close()
        n = max(len(ndcg), 1)
        results.append(
            RunResult(
                run,
                sum(ndcg) / n,
                sum(r5) / n,
                sum(r10) / n,
                sum(mrr) / n,
                summarise(latencies),
                {c: sum(v) / len(v) for c, v in sorted(by_category.items())},
            )
        )
    return results, ranker


# The idf of each query lexeme in the tenant the probe is asked of (calibration's evidence).
TermIdf = Callable[[str], Awaitable[list[float]]]


async def dump_legs(
    client: httpx.AsyncClient, probes: Sequence[Probe], path: Path, idf: TermIdf | None = None
) -> None:
    """Append each probe's keyword and semantic top-DUMP_DEPTH (ids, raw leg scores) as JSON lines.

    The raw scores are the ones the service fuses (keyword: BM25 mapped to [0, 1), or the substring
    tier's halved shares when BM25 matched nothing, `keyword_match` says which; semantic: cosine), so
    fusions and calibrations can be fitted offline without asking the service again.
    """
    bar = progress_bar(len(probes), f"dump {path.stem}")
    with path.open("a") as handle:
        for i, probe in enumerate(probes):
            query = EvalQuery(f"{probe.source}:{i}", probe.text, probe.relevance, scope=probe.scope)
            record: dict[str, Any] = {
                "set": probe.set_name,
                "source": probe.source,
                "text": probe.text,
                "scope": probe.scope,
                "relevance": probe.relevance,
            }
            for leg in ("keyword", "semantic"):
                found, _, _ = await _search(client, query, Run(leg), DUMP_DEPTH)
                record[leg] = [[_eval_id(r), r["score_breakdown"]["raw_scores"][leg]] for r in found]
                if leg == "keyword":
                    # BM25 or the substring tier: the service reads the query terms' ceiling only for BM25.
                    record["keyword_match"] = found[0]["match_type"] if found else None
            if idf is not None:
                record["idf"] = await idf(probe.text)
            handle.write(json.dumps(record) + "\n")
            bar.update()
    bar.close()


async def keyword_agreement(
    client: httpx.AsyncClient, eval_set: EvalSet, *, k: int = 10, progress: bool = True
) -> float:
    """Share of top-k positions where the keyword leg (pruned) returns what exact BM25 returns."""
    same = total = 0
    bar = progress_bar(len(eval_set.queries), f"{eval_set.name} keyword vs exact", enabled=progress)
    for query in eval_set.queries:
        pruned, _, _ = await _search(client, query, Run("keyword"), k)
        exact, _, _ = await _search(client, query, Run("keyword"), k, exact=True)
        same += sum(1 for a, b in zip(pruned, exact, strict=False) if a["id"] == b["id"])
        total += len(exact)
        bar.update()
    bar.close()
    return same / total if total else 1.0


def positive_probes(eval_set: EvalSet) -> list[Probe]:
    """The set's own judged queries."""
    return [Probe(eval_set.name, eval_set.name, q.text, q.scope, q.relevance) for q in eval_set.queries]


def cross_set_probes(source: EvalSet, target: EvalSet) -> list[Probe]:
    """source's queries asked of target's tenant (in its conversations' scopes, in turn)."""
    scopes: Sequence[str | None] = target.agents or [None]
    return [
        Probe(target.name, f"{source.name} queries in {target.name}", q.text, scopes[i % len(scopes)])
        for i, q in enumerate(source.queries)
    ]


def negative_sources(eval_set: EvalSet, others: Sequence[EvalSet]) -> list[EvalSet]:
    """The sets whose questions are negatives in eval_set's tenant: other families', each text once.

    A set of the same family (another import style, the short version) asks about the same
    memories, so its questions have answers here; one family's sets with the same questions (its
    import styles) are asked once. A set stored as another set's memories asks none: they would be
    the same probes in the same tenant as that set's.
    """
    if eval_set.stored_as is not None:
        return []
    sources: list[EvalSet] = []
    for other in others:
        if other.family != eval_set.family and all(other.queries != s.queries for s in sources):
            sources.append(other)
    return sources


def cross_conversation_probes(eval_set: EvalSet) -> list[Probe]:
    """A conversation's questions that name its speakers, asked in the next conversation's scope."""
    agents = eval_set.agents
    if len(agents) < 2:
        return []
    return [
        Probe(
            eval_set.name,
            f"{eval_set.name} questions naming their people, in another conversation",
            q.text,
            agents[(agents.index(q.scope) + 1) % len(agents)],
        )
        for q in eval_set.queries
        if q.names and q.scope in agents
    ]
