"""`recalld eval`: load a BEIR dataset through the write API, run every mode, report quality and latency."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

from app.evaluation.beir import BeirDataset
from app.evaluation.metrics import mrr_at_k, ndcg_at_k, recall_at_k, summarise
from app.progress import progress_bar


@dataclass(slots=True)
class ModeResult:
    """Quality and latency of one search mode."""

    mode: str
    ndcg10: float
    recall10: float
    recall100: float
    mrr10: float
    latency_ms: dict[str, float]


@dataclass(slots=True)
class EvalReport:
    """Everything `recalld eval` prints."""

    documents: int
    queries: int
    ingest_seconds: float
    keyword_ranker: str
    results: list[ModeResult] = field(default_factory=list)
    # Share of top-10 positions where the keyword leg's ranking equals exact BM25's.
    keyword_agreement: float | None = None

    def markdown(self) -> str:
        """The report as a markdown table."""
        rate = self.documents / self.ingest_seconds if self.ingest_seconds > 0 else 0.0
        lines = [
            f"documents {self.documents}, queries {self.queries}, keyword ranker {self.keyword_ranker}, "
            f"ingest {self.ingest_seconds:.1f}s ({rate:.0f} docs/s)",
            "",
            "| mode | nDCG@10 | recall@10 | recall@100 | MRR@10 | p50 ms | p95 ms |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in self.results:
            lines.append(
                f"| {r.mode} | {r.ndcg10:.3f} | {r.recall10:.3f} | {r.recall100:.3f} | {r.mrr10:.3f} "
                f"| {r.latency_ms['p50']:.1f} | {r.latency_ms['p95']:.1f} |"
            )
        if self.keyword_agreement is not None:
            lines += ["", f"keyword top-10 positions equal to exact BM25: {self.keyword_agreement:.3f}"]
        return "\n".join(lines)


async def ingest(
    client: httpx.AsyncClient, dataset: BeirDataset, *, batch: int = 256, progress: bool = True
) -> float:
    """Write every document as a fact (idempotent per document id); returns seconds taken."""
    started = time.perf_counter()
    ids = sorted(dataset.corpus)
    bar = progress_bar(len(ids), "ingest", enabled=progress)
    for start in range(0, len(ids), batch):
        items = [
            {
                "type": "fact",
                "content": dataset.corpus[doc_id][:60000],
                "metadata": {"beir_id": doc_id},
                "idempotency_key": f"beir:{doc_id}",
            }
            for doc_id in ids[start : start + batch]
        ]
        response = await client.post("/v1/memories:batch", json={"items": items})
        response.raise_for_status()
        bar.update(len(items))
    bar.close()
    return time.perf_counter() - started


async def evaluate(
    client: httpx.AsyncClient,
    dataset: BeirDataset,
    modes: Sequence[str],
    *,
    fusion: str = "rrf",
    progress: bool = True,
) -> tuple[list[ModeResult], str]:
    """Run every query in every mode; returns per-mode results and the keyword ranker in use."""
    results = []
    ranker = "unknown"
    for mode in modes:
        ndcg, r10, r100, mrr, latencies = [], [], [], [], []
        bar = progress_bar(len(dataset.queries), mode, enabled=progress)
        for query_id, text in sorted(dataset.queries.items()):
            started = time.perf_counter()
            response = await client.post(
                "/v1/search",
                json={
                    "query": text,
                    "mode": mode,
                    "fusion": fusion,
                    "limit": 100,
                    "min_score": 0,
                    "min_confidence": 0,
                },
            )
            latencies.append((time.perf_counter() - started) * 1000)
            response.raise_for_status()
            body = response.json()
            ranker = body["keyword_ranker"]
            ranked = list(dict.fromkeys(r["metadata"].get("beir_id", "") for r in body["results"]))
            relevance = dataset.qrels[query_id]
            ndcg.append(ndcg_at_k(ranked, relevance, 10))
            r10.append(recall_at_k(ranked, relevance, 10))
            r100.append(recall_at_k(ranked, relevance, 100))
            mrr.append(mrr_at_k(ranked, relevance, 10))
            bar.update()
        bar.close()
        n = len(ndcg)
        label = f"{mode} ({fusion})" if mode == "hybrid" and fusion != "rrf" else mode
        results.append(
            ModeResult(label, sum(ndcg) / n, sum(r10) / n, sum(r100) / n, sum(mrr) / n, summarise(latencies))
        )
    return results, ranker


async def keyword_agreement(
    client: httpx.AsyncClient, dataset: BeirDataset, *, k: int = 10, progress: bool = True
) -> float:
    """Share of top-k positions where the keyword leg (pruned) returns what exact BM25 returns."""
    same = total = 0
    bar = progress_bar(len(dataset.queries), "keyword vs exact", enabled=progress)
    for _, text in sorted(dataset.queries.items()):
        ranked = []
        for exact in (False, True):
            body = {
                "query": text,
                "mode": "keyword",
                "limit": k,
                "min_score": 0,
                "min_confidence": 0,
                "exact": exact,
            }
            response = await client.post("/v1/search", json=body)
            response.raise_for_status()
            ranked.append([r["id"] for r in response.json()["results"]])
        pruned, exact_ids = ranked
        same += sum(1 for a, b in zip(pruned, exact_ids, strict=False) if a == b)
        total += len(exact_ids)
        bar.update()
    bar.close()
    return same / total if total else 1.0
