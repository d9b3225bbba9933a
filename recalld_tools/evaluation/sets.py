"""`recalld eval`'s evaluation sets: the memories to write and the judged queries to ask, as read from disk."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from app.retrieval.highlights import STOPWORDS
from app.retrieval.query import WORD
from recalld_tools.evaluation.beir import load_beir
from recalld_tools.evaluation.locomo import TurnFormat, load_locomo

SetKind = Literal["beir", "conversations"]


# Episodes of a conversation set must outlive any reuse of a kept evaluation database.
EPISODE_EXPIRY = "2100-01-01T00:00:00Z"


@dataclass(frozen=True, slots=True)
class EvalQuery:
    """One judged query: its text, the scope it is asked in, and the graded relevant ids."""

    id: str
    text: str
    relevance: dict[str, int]
    scope: str | None = None
    category: str | None = None
    # Conversations: the speakers the question names (see abstention negatives).
    names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EvalSet:
    """What to write (batch items carrying `metadata.eval_id`) and what to ask."""

    name: str
    kind: SetKind
    items: list[dict[str, Any]]
    queries: list[EvalQuery]
    # Conversations: each conversation's agent (its scope), in file order.
    agents: tuple[str, ...] = ()
    # A set that asks other queries of another set's memories: that set's name (its tenant).
    stored_as: str | None = None
    # The dataset it was read from: sets of one family (import styles, short versions) share their
    # questions' answers, so none is a negative for another.
    family: str = ""

    @property
    def metric(self) -> str:
        """The headline metric: nDCG@10 for BEIR, evidence recall@10 for conversations."""
        return "nDCG@10" if self.kind == "beir" else "R@10"

    def fingerprint(self) -> str:
        """A short digest of the items: a kept database is reused only for exactly this content."""
        digest = hashlib.sha256(json.dumps(self.items, sort_keys=True).encode()).hexdigest()
        return digest[:10]

    def limited(self, count: int) -> EvalSet:
        """The same set with only its first `count` queries (0: all)."""
        return self if count <= 0 else replace(self, queries=self.queries[:count])


def _beir_set(folder: Path) -> EvalSet:
    data = load_beir(folder)
    items = [
        {
            "type": "fact",
            "content": data.corpus[doc_id][:60000],
            "metadata": {"eval_id": doc_id},
            "idempotency_key": f"eval:{doc_id}",
        }
        for doc_id in sorted(data.corpus)
    ]
    queries = [EvalQuery(q, text, data.qrels[q]) for q, text in sorted(data.queries.items())]
    return EvalSet(folder.name, "beir", items, queries, family=folder.name)


def _conversation_set(path: Path, turn_format: TurnFormat) -> EvalSet:
    data = load_locomo(path, turn_format)
    items = [
        {
            "type": "episode",
            "content": t.content,
            "butler": t.agent,
            "session_id": t.session_id,
            "created_at": t.created_at.isoformat(),
            "expires_at": EPISODE_EXPIRY,
            "metadata": {"eval_id": t.id},
            "idempotency_key": f"eval:{t.id}",
        }
        for t in data.turns
    ]
    queries = [
        EvalQuery(
            q.id, q.text, dict.fromkeys(q.evidence, 1), scope=q.agent, category=str(q.category), names=q.names
        )
        for q in data.questions
    ]
    family = path.stem if path.is_file() else path.name
    name = family if turn_format == "episodes" else f"{family}-{turn_format}"
    return EvalSet(name, "conversations", items, queries, data.agents, family=family)


# Entity-style queries keep at most this many content words of a query: a name and a topic or two.
SHORT_QUERY_WORDS = 4


def short_query(text: str) -> str:
    """A query cut to its first SHORT_QUERY_WORDS content words (stopwords dropped): a name or topic."""
    words = [w for w in WORD.findall(text) if w.lower() not in STOPWORDS]
    return " ".join(words[:SHORT_QUERY_WORDS]) or text


def short_queries(eval_set: EvalSet) -> EvalSet:
    """The set's queries asked as short entity-style queries of its memories (`<set>-short`)."""
    queries = [replace(q, text=short_query(q.text)) for q in eval_set.queries]
    return replace(eval_set, name=f"{eval_set.name}-short", queries=queries, stored_as=eval_set.name)


def load_set(path: Path, turn_format: TurnFormat = "episodes") -> EvalSet:
    """A BEIR folder (corpus.jsonl…) or a LoCoMo conversation file (or a folder holding one)."""
    if (path / "corpus.jsonl").exists():
        return _beir_set(path)
    if path.suffix == ".json" or (path.is_dir() and any(path.glob("*.json"))):
        return _conversation_set(path, turn_format)
    raise FileNotFoundError(f"{path}: neither a BEIR folder (corpus.jsonl) nor a LoCoMo .json")
