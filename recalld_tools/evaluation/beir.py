"""Loading a BEIR-format dataset folder (corpus.jsonl, queries.jsonl, qrels/test.tsv)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class BeirDataset:
    """Documents, the queries that have judgements, and the judgements."""

    corpus: dict[str, str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def load_beir(folder: Path, split: str = "test") -> BeirDataset:
    """Read a BEIR folder; a document's text is its title and body, as BEIR's own evaluation does."""
    for name in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv"):
        if not (folder / name).exists():
            raise FileNotFoundError(f"{folder / name} is missing: not a BEIR dataset folder")
    corpus: dict[str, str] = {}
    with (folder / "corpus.jsonl").open() as handle:
        for line in handle:
            if line.strip():
                doc = json.loads(line)
                title = (doc.get("title") or "").strip()
                corpus[str(doc["_id"])] = f"{title}\n{doc['text']}".strip() if title else str(doc["text"])
    qrels: dict[str, dict[str, int]] = {}
    with (folder / "qrels" / f"{split}.tsv").open() as handle:
        for number, line in enumerate(handle):
            parts = line.rstrip("\n").split("\t")
            if number == 0 and not parts[-1].lstrip("-").isdigit():
                continue  # header
            if len(parts) >= 3:
                qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    queries: dict[str, str] = {}
    with (folder / "queries.jsonl").open() as handle:
        for line in handle:
            if line.strip():
                query = json.loads(line)
                if str(query["_id"]) in qrels:
                    queries[str(query["_id"])] = str(query["text"])
    return BeirDataset(corpus=corpus, queries=queries, qrels={q: r for q, r in qrels.items() if q in queries})
