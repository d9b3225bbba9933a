"""Fit the calibrated score offline from dumped legs, and show how it holds on a set it was not fitted on.

    recalld eval SETS... --abstention --dump-legs DIR --reuse     # once: the legs, positives and negatives
    python -m recalld_tools.evaluation.calibration_fit DIR [--floors 0.03 0.045 0.06]

Every record of DIR/*.jsonl is one question: its keyword and semantic top 100 (ids, the raw scores
the service fuses), the idf of its terms in the tenant it was asked of, and its judged answers
(none for a negative). Each question's candidates are fused and described by the service's own
code (`fuse_adaptive`, `calibration.features`), so a change of fusion is refitted by running this
again on the same dump. Candidates are each question's top 10 in the adaptive order, labelled
relevant when judged so; the logistic model is fitted by Newton's method, every candidate weighing
the same (weighing each set family the same let the 43 MS MARCO questions, whose top 10 are nearly
all judged relevant, set the scale for the other families). A family is a set whatever way it was
stored (`-transcript` is the same set). It prints the coefficients to put in
`app/retrieval/calibration.py`, then markdown tables: floors (negatives answered, positives' nDCG@10
and evidence recall@10 kept, per family), leave one family out (fitted without the family, its
positives and every negative asked of it or built from its questions), AUROC of the top score and
a reliability diagram.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from app.retrieval import calibration
from app.retrieval.fusion import fuse_adaptive, unmap_keyword_score
from app.retrieval.hits import Hit, Leg
from recalld_tools.evaluation.metrics import auroc, ndcg_at_k, recall_at_k

# The legs were dumped at the service's leg depth.
DEPTH = 100
# What a default search shows: the calibrated floor applies to these.
SHOWN = 10
# A weak ridge: keeps the Newton steps finite when a feature barely varies in a family.
L2 = 1e-3
DEFAULT_FLOORS = (0.02, 0.03, 0.04, 0.045, 0.05, 0.06, 0.08, 0.1)
RELIABILITY_BINS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
_EPOCH = datetime(2020, 1, 1, tzinfo=UTC)

Matrix = npt.NDArray[np.float64]


def family(set_name: str) -> str:
    """The set a name belongs to, however it was stored (`locomo-dev-transcript` is `locomo-dev`)."""
    return set_name.removesuffix("-transcript")


@dataclass(slots=True)
class Question:
    """One dumped question: its candidates in the adaptive order, their features and labels."""

    set_name: str
    source: str
    relevance: dict[str, int]
    ids: list[str] = field(default_factory=list)
    features: list[tuple[float, ...]] = field(default_factory=list)

    @property
    def negative(self) -> bool:
        """Asked where nothing answers it."""
        return not self.relevance

    @property
    def families(self) -> set[str]:
        """The families it involves: the tenant it was asked of, and for a negative its questions' set."""
        involved = {family(self.set_name)}
        if self.negative and " queries in " in self.source:
            involved.add(family(self.source.split(" queries in ")[0]))
        return involved

    def labels(self) -> list[float]:
        """1.0 for a judged-relevant candidate among the shown ones, else 0.0."""
        return [1.0 if self.relevance.get(i, 0) > 0 else 0.0 for i in self.ids[:SHOWN]]


def _bm25_tier(record: dict[str, Any], keyword: Sequence[tuple[str, float]]) -> bool:
    """Whether the keyword leg came from BM25 (not the substring tier that answers when BM25 matched nothing).

    A dump made before `keyword_match` was recorded tells by the scores: the substring tier's are
    halved shares of the query's patterns matched (fractions with a small denominator), which BM25
    scores mapped into [0, 1) never all are.
    """
    if "keyword_match" in record:
        return bool(record["keyword_match"] == "bm25")
    return any(
        2 * score > 1 or abs(float(Fraction(2 * score).limit_denominator(64)) - 2 * score) > 1e-12
        for _, score in keyword
    )


def question(record: dict[str, Any]) -> Question:
    """A dumped record fused and described as the service does it."""
    q = Question(
        str(record["set"]), str(record["source"]), {str(k): int(v) for k, v in record["relevance"].items()}
    )
    found = {leg: [(str(i), float(s)) for i, s in record.get(leg) or []] for leg in ("keyword", "semantic")}
    if not found["semantic"]:
        return q  # not calibrated: the service calibrates only where the semantic leg ran
    # The legs as services.ranking.rank_candidates hands them to fusion: whatever else fusion reads
    # from a leg there must be set here too, or the refit fits another fusion. There a BM25 leg
    # carries its query terms' ceiling (the adaptive shares scale the keyword leg by its share of
    # it); the substring tier carries none, and the calibration sees no BM25 evidence.
    legs = {
        leg: Leg([Hit(i, s, _EPOCH, None) for i, s in pairs], [s for _, s in pairs])  # type: ignore[arg-type]
        for leg, pairs in found.items()
    }
    bm25_tier = _bm25_tier(record, found["keyword"])
    idfs = [float(x) for x in record.get("idf") or []] if bm25_tier else []
    if idfs:
        legs["keyword"].ceiling = calibration.keyword_ceiling(idfs)
    fused, _ = fuse_adaptive(legs, {"keyword": 1.0, "semantic": 1.0}, depth=DEPTH)
    evidence = calibration.QueryEvidence.of(
        cosines=legs["semantic"].scores,
        bm25=[unmap_keyword_score(s) for s in legs["keyword"].scores] if idfs else [],
        ceiling=calibration.keyword_ceiling(idfs),
        semantic_ids=[i for i, _ in found["semantic"]],
        keyword_ids=[i for i, _ in found["keyword"]],
        depth=DEPTH,
    )
    # The adaptive order, ties as the dump listed them (the service breaks them by date and id).
    ranked = sorted(fused, key=lambda hit: -hit.fused)
    q.ids = [str(hit.id) for hit in ranked]
    q.features = [calibration.features(hit.fused, evidence) for hit in ranked[:SHOWN]]
    return q


def load(directory: Path) -> list[Question]:
    """Every question dumped in DIRECTORY/*.jsonl."""
    return [
        question(json.loads(line))
        for path in sorted(directory.glob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def fit(questions: Sequence[Question], l2: float = L2) -> tuple[float, ...]:
    """Logistic coefficients (intercept first), every labelled candidate weighing the same."""
    rows = [(x, y) for q in questions for x, y in zip(q.features, q.labels(), strict=True)]
    x = np.array([(1.0, *features) for features, _ in rows])
    y = np.array([label for _, label in rows])
    ridge = 2 * l2 * len(rows) * np.eye(x.shape[1])
    ridge[0, 0] = 0.0  # the intercept is not shrunk
    w = np.zeros(x.shape[1])
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        gradient = x.T @ (p - y) + ridge @ w
        hessian = (x * (p * (1 - p))[:, None]).T @ x + ridge
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    return tuple(round(float(v), 3) for v in w)


def _probabilities(q: Question, coefficients: Sequence[float]) -> list[float]:
    return [calibration.probability_of(features, coefficients) for features in q.features]


@dataclass(frozen=True, slots=True)
class Outcome:
    """A group's result at one floor: negatives answered, positives' nDCG@10 and R@10 kept."""

    answered: float
    ndcg_kept: float
    recall_kept: float


def at_floor(questions: Sequence[Question], coefficients: Sequence[float], floor: float) -> Outcome:
    """What the default settings keep with this floor, against `min_score: 0`."""
    negatives = [q for q in questions if q.negative]
    answered = sum(
        1.0 for q in negatives if q.features and _probabilities(q, coefficients)[0] >= floor
    ) / max(len(negatives), 1)
    kept = {"ndcg": [0.0, 0.0], "recall": [0.0, 0.0]}
    for q in questions:
        if q.negative:
            continue
        probabilities = _probabilities(q, coefficients)
        # The service's cut: the floor decides whether the question is answered, then its best counts.
        cut = calibration.default_floor(floor, probabilities[0]) if probabilities else floor
        shown = [i for i, p in zip(q.ids, probabilities, strict=False) if p >= cut]
        for name, metric in (("ndcg", ndcg_at_k), ("recall", recall_at_k)):
            kept[name][0] += metric(shown, q.relevance, SHOWN)
            kept[name][1] += metric(q.ids, q.relevance, SHOWN)
    ndcg, recall = (kept[n][0] / kept[n][1] if kept[n][1] else 1.0 for n in ("ndcg", "recall"))
    return Outcome(answered, ndcg, recall)


def top_auroc(questions: Sequence[Question], coefficients: Sequence[float]) -> str:
    """AUROC of the top calibrated score, positives against negatives ("–" without negatives)."""

    def top(q: Question) -> float:
        return _probabilities(q, coefficients)[0] if q.features else 0.0

    negatives = [top(q) for q in questions if q.negative]
    if not negatives:
        return "–"
    return f"{auroc([top(q) for q in questions if not q.negative], negatives):.3f}"


def reliability(
    questions: Sequence[Question], coefficients: Sequence[float]
) -> list[tuple[str, int, float, float, dict[str, float | None]]]:
    """Per probability bin over the shown candidates: the bin, count, mean predicted, share relevant,
    and the share relevant in each family."""
    families = list(dict.fromkeys(family(q.set_name) for q in questions))
    rows = []
    for low, high in itertools.pairwise(RELIABILITY_BINS):
        inside = [
            (p, y, family(q.set_name))
            for q in questions
            for p, y in zip(_probabilities(q, coefficients), q.labels(), strict=True)
            if low <= p < high or (high == RELIABILITY_BINS[-1] and p == high)
        ]
        if not inside:
            continue
        predicted = sum(p for p, _, _ in inside) / len(inside)
        observed = sum(y for _, y, _ in inside) / len(inside)
        by_family: dict[str, float | None] = {}
        for name in families:
            labels = [y for _, y, f in inside if f == name]
            by_family[name] = sum(labels) / len(labels) if labels else None
        rows.append((f"{low:.2f}–{high:.2f}", len(inside), predicted, observed, by_family))
    return rows


def _outcome_cells(o: Outcome) -> str:
    return f"{o.answered:.2f} | {o.ndcg_kept:.3f} | {o.recall_kept:.3f}"


def report(questions: Sequence[Question], floors: Sequence[float], l2: float = L2) -> str:
    """The fit and its tables, as markdown."""
    families = list(dict.fromkeys(family(q.set_name) for q in questions))
    coefficients = fit(questions, l2)
    lines = [
        f"{len(questions)} questions ({sum(q.negative for q in questions)} negatives), "
        f"{sum(len(q.features) for q in questions)} labelled candidates, families: {', '.join(families)}",
        "",
        f"COEFFICIENTS = {coefficients}",
        "",
        "Floors, fitted on everything (negatives answered | nDCG@10 kept | R@10 kept):",
        "",
        "| floor | all | " + " | ".join(families) + " |",
        "|---|---|" + "---|" * len(families),
    ]
    by_family = {f: [q for q in questions if family(q.set_name) == f] for f in families}
    for floor in floors:
        cells = [_outcome_cells(at_floor(questions, coefficients, floor))]
        cells += [_outcome_cells(at_floor(by_family[f], coefficients, floor)) for f in families]
        lines.append(f"| {floor:g} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "AUROC of the top score, fitted on everything: "
        + ", ".join(f"{f} {top_auroc(by_family[f], coefficients)}" for f in families)
        + f", all {top_auroc(questions, coefficients)}",
        "",
        "Leave one family out: fitted without it, measured on its positives and the negatives asked of it",
        "(negatives answered | nDCG@10 kept | R@10 kept):",
        "",
        "| held out | coefficients | AUROC | " + " | ".join(f"{floor:g}" for floor in floors) + " |",
        "|---|---|---|" + "---|" * len(floors),
    ]
    for held in families:
        held_coefficients = fit([q for q in questions if held not in q.families], l2)
        test = by_family[held]
        cells = [
            _outcome_cells(at_floor(test, held_coefficients, floor)).replace(" | ", " / ") for floor in floors
        ]
        lines.append(
            f"| {held} | {held_coefficients} | {top_auroc(test, held_coefficients)} | "
            + " | ".join(cells)
            + " |"
        )
    lines += [
        "",
        "Reliability, fitted on everything (each question's top 10; then the share relevant per family):",
        "",
        "| predicted | candidates | mean predicted | observed relevant | " + " | ".join(families) + " |",
        "|---|---|---|---|" + "---|" * len(families),
    ]
    for label, n, predicted, observed, per in reliability(questions, coefficients):
        shares = " | ".join("" if per[f] is None else f"{per[f]:.3f}" for f in families)
        lines.append(f"| {label} | {n:,} | {predicted:.3f} | {observed:.3f} | {shares} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: python -m recalld_tools.evaluation.calibration_fit DIR [--floors ...] [--l2 ...]."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("legs", type=Path, help="the --dump-legs directory of `recalld eval --abstention`")
    parser.add_argument("--floors", type=float, nargs="+", default=list(DEFAULT_FLOORS))
    parser.add_argument("--l2", type=float, default=L2, help=f"ridge on the coefficients (default {L2})")
    args = parser.parse_args(argv)
    questions = load(args.legs)
    if not questions:
        parser.error(f"no dumped legs in {args.legs}")
    print(report(questions, args.floors, args.l2))


if __name__ == "__main__":
    main()
