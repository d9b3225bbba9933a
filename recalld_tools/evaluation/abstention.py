"""`recalld eval --abstention`: questions about things never stored, and what the default settings keep.

Negatives are built from the loaded sets themselves: each set's queries asked of another set's tenant,
and a conversation's questions that name its speakers asked in another conversation's scope (the same
tenant, so BM25's statistics still know the names). A negative is "answered" when the default
settings return anything. Positives are each set's own judged queries; what they keep at default
settings is compared with `min_score: 0` (the best-effort list, where quality is measured).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from recalld_tools.evaluation.metrics import auroc, ndcg_at_k, recall_at_k
from recalld_tools.progress import progress_bar


@dataclass(frozen=True, slots=True)
class Probe:
    """One question to ask: its text and scope, and the judged answers (empty for a negative)."""

    set_name: str
    source: str
    text: str
    scope: str | None
    relevance: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class Answer:
    """What one probe got: top score at min_score 0, metrics at min_score 0 and at default settings."""

    probe: Probe
    top_score: float
    answered_default: bool
    ndcg_min0: float = 0.0
    ndcg_default: float = 0.0
    recall_min0: float = 0.0
    recall_default: float = 0.0


async def _ask(
    client: httpx.AsyncClient, probe: Probe, limit: int, *, min_score: float | None
) -> list[dict[str, Any]]:
    body: dict[str, Any] = {"query": probe.text, "limit": limit, "min_confidence": 0}
    if min_score is not None:
        body["min_score"] = min_score
    if probe.scope:
        body["scope"] = probe.scope
    response = await client.post("/v1/search", json=body)
    response.raise_for_status()
    results: list[dict[str, Any]] = response.json()["results"]
    return results


def _ids(results: Sequence[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(str(r["metadata"].get("eval_id", "")) for r in results))


async def ask_probes(
    client: httpx.AsyncClient, probes: Sequence[Probe], label: str, *, limit: int = 10, progress: bool = True
) -> list[Answer]:
    """Each probe asked twice with the default fusion: `min_score: 0`, and the default settings."""
    answers = []
    bar = progress_bar(len(probes), label, enabled=progress)
    for probe in probes:
        best_effort = await _ask(client, probe, limit, min_score=0)
        default = await _ask(client, probe, limit, min_score=None)
        answer = Answer(probe, float(best_effort[0]["score"]) if best_effort else 0.0, bool(default))
        if probe.relevance:
            for name, results in (("min0", best_effort), ("default", default)):
                ranked = _ids(results)
                setattr(answer, f"ndcg_{name}", ndcg_at_k(ranked, probe.relevance, 10))
                setattr(answer, f"recall_{name}", recall_at_k(ranked, probe.relevance, 10))
        answers.append(answer)
        bar.update()
    bar.close()
    return answers


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _kept(default: Sequence[float], best_effort: Sequence[float]) -> float:
    total = sum(best_effort)
    return sum(default) / total if total > 0 else 1.0


def markdown(positives: Sequence[Answer], negatives: Sequence[Answer]) -> str:
    """Per set and source: negatives answered at default settings, positives' share kept, AUROC."""
    lines = [
        "| positives (set) | queries | nDCG@10 kept | R@10 kept | top score median |",
        "|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(a.probe.set_name for a in positives):
        group = [a for a in positives if a.probe.set_name == name]
        scores = sorted(a.top_score for a in group)
        lines.append(
            f"| {name} | {len(group)} | {_kept([a.ndcg_default for a in group], [a.ndcg_min0 for a in group]):.3f} "
            f"| {_kept([a.recall_default for a in group], [a.recall_min0 for a in group]):.3f} "
            f"| {scores[len(scores) // 2]:.3f} |"
        )
    lines += [
        "",
        "| negatives (asked where never stored) | queries | answered at default settings | top score median | AUROC vs all positives |",
        "|---|---|---|---|---|",
    ]
    all_positive = [a.top_score for a in positives]
    for source in dict.fromkeys(a.probe.source for a in negatives):
        group = [a for a in negatives if a.probe.source == source]
        scores = sorted(a.top_score for a in group)
        lines.append(
            f"| {source} | {len(group)} | {_mean([float(a.answered_default) for a in group]):.3f} "
            f"| {scores[len(scores) // 2]:.3f} | {auroc(all_positive, [a.top_score for a in group]):.3f} |"
        )
    answered = _mean([float(a.answered_default) for a in negatives])
    lines += [
        "",
        f"All: {len(negatives)} negatives, {answered:.3f} answered at default settings; "
        f"{len(positives)} positives keep {_kept([a.ndcg_default for a in positives], [a.ndcg_min0 for a in positives]):.3f} "
        f"of their nDCG@10 and {_kept([a.recall_default for a in positives], [a.recall_min0 for a in positives]):.3f} "
        f"of their evidence recall@10 at default settings (vs `min_score: 0`); AUROC of the top score "
        f"{auroc(all_positive, [a.top_score for a in negatives]):.3f}.",
    ]
    return "\n".join(lines)
