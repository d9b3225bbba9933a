"""`recalld eval`'s set loading: LoCoMo conversations become episodes and scoped questions."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from recalld_tools.evaluation.locomo import parse_session_time
from recalld_tools.evaluation.metrics import auroc
from recalld_tools.evaluation.runner import (
    Run,
    cross_conversation_probes,
    cross_set_probes,
    negative_sources,
    positive_probes,
)
from recalld_tools.evaluation.sets import load_set, short_queries, short_query

CONVERSATION = [
    {
        "sample_id": "conv-1",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a cat."},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "Lovely!", "blip_caption": "a photo of a cat"},
            ],
            "session_2_date_time": "9:05 am on 1 June, 2023",
            "session_2": [{"speaker": "Ana", "dia_id": "D2:1", "text": "The cat is called Miso."}],
        },
        "qa": [
            {"question": "What pet did Ana adopt?", "answer": "a cat", "evidence": ["D1:1"], "category": 4},
            {
                "question": "Cat's name and photo?",
                "answer": "Miso",
                "evidence": ["D2:1; D1:2"],
                "category": 1,
            },
            {"question": "What did Bo adopt?", "answer": "nothing", "evidence": [], "category": 5},
        ],
    }
]


def test_locomo_turns_are_episodes_of_the_conversations_agent(tmp_path: Path) -> None:
    path = tmp_path / "conv.json"
    path.write_text(json.dumps(CONVERSATION))
    loaded = load_set(path)
    assert loaded.kind == "conversations" and loaded.metric == "R@10"
    first, second, third = loaded.items
    assert first["type"] == "episode" and first["butler"] == "conv-1"
    assert first["session_id"] == "conv-1:session_1" and third["session_id"] == "conv-1:session_2"
    assert first["created_at"] == "2023-05-08T13:56:00+00:00"
    assert second["created_at"] == "2023-05-08T13:56:01+00:00"  # turn order kept within the session
    assert first["content"] == "Ana: I adopted a cat."
    assert second["content"] == "Bo: Lovely! [shared a photo of a cat]"
    assert [i["metadata"]["eval_id"] for i in loaded.items] == ["conv-1:D1:1", "conv-1:D1:2", "conv-1:D2:1"]
    # Category 5 has no evidence and is left out; "D2:1; D1:2" is two evidence turns.
    assert [(q.text, q.scope, q.category, sorted(q.relevance)) for q in loaded.queries] == [
        ("What pet did Ana adopt?", "conv-1", "4", ["conv-1:D1:1"]),
        ("Cat's name and photo?", "conv-1", "1", ["conv-1:D1:2", "conv-1:D2:1"]),
    ]


def test_a_folder_that_is_neither_format_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_set(tmp_path)


def test_session_times_parse_to_utc() -> None:
    assert parse_session_time("12:09 am on 3 July, 2023") == datetime(2023, 7, 3, 0, 9, tzinfo=UTC)
    assert parse_session_time("12:30 pm on 3 July, 2023") == datetime(2023, 7, 3, 12, 30, tzinfo=UTC)
    with pytest.raises(ValueError):
        parse_session_time("yesterday")


def test_runs_parse_mode_and_fusion() -> None:
    assert Run.parse("hybrid:weighted") == Run("hybrid", "weighted")
    assert Run.parse("hybrid").label == "hybrid (default)"
    with pytest.raises(ValueError):
        Run.parse("keyword:rrf")


def test_transcript_format_stores_every_turn_of_a_session_at_its_date(tmp_path: Path) -> None:
    path = tmp_path / "conv.json"
    path.write_text(json.dumps(CONVERSATION))
    s = load_set(path, "transcript")
    assert s.name == "conv-transcript"
    assert [i["content"] for i in s.items] == [
        "Ana (1:56 pm on 8 May, 2023): I adopted a cat.",
        "Bo (1:56 pm on 8 May, 2023): Lovely!",
        "Ana (9:05 am on 1 June, 2023): The cat is called Miso.",
    ]
    # One date per session: only the order the turns are written in keeps the conversation's order.
    assert [i["created_at"] for i in s.items[:2]] == ["2023-05-08T13:56:00+00:00"] * 2
    assert load_set(path).items[1]["created_at"] == "2023-05-08T13:56:01+00:00"


def test_negatives_ask_questions_where_their_answers_were_never_stored(tmp_path: Path) -> None:
    other = json.loads(json.dumps(CONVERSATION[0]))
    other["sample_id"] = "conv-2"
    other["conversation"]["speaker_a"], other["conversation"]["speaker_b"] = "Cy", "Di"
    path = tmp_path / "two.json"
    path.write_text(json.dumps([CONVERSATION[0], other]))
    conversations = load_set(path)
    # Only questions naming their own conversation's people ("Ana"; not conv-2's, which names no Cy/Di).
    crossed = cross_conversation_probes(conversations)
    assert [(p.text, p.scope, p.relevance) for p in crossed] == [("What pet did Ana adopt?", "conv-2", {})]
    beir = tmp_path / "beir"
    beir.mkdir()
    (beir / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "title": "", "text": "Cats purr."}) + "\n")
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "Do cats purr?"}) + "\n")
    (beir / "qrels").mkdir()
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    asked = cross_set_probes(load_set(beir), conversations)
    assert [(p.text, p.scope, p.relevance) for p in asked] == [("Do cats purr?", "conv-1", {})]
    assert positive_probes(conversations)[0].relevance == {"conv-1:D1:1": 1}


def test_auroc_counts_ties_as_half() -> None:
    assert auroc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert auroc([0.5], [0.5]) == 0.5
    assert auroc([0.1], [0.9, 0.05]) == 0.5


def test_short_queries_are_entity_style_questions_of_the_same_memories(tmp_path: Path) -> None:
    assert short_query("When did Caroline go to the LGBTQ support group?") == "Caroline go LGBTQ support"
    assert short_query("causes of left ventricular hypertrophy") == "causes left ventricular hypertrophy"
    assert short_query("what is the") == "what is the"  # nothing but stopwords: asked as it is
    path = tmp_path / "conv.json"
    path.write_text(json.dumps(CONVERSATION))
    loaded = load_set(path)
    short = short_queries(loaded)
    assert short.name == "conv-short" and short.stored_as == "conv"
    assert short.items == loaded.items and short.fingerprint() == loaded.fingerprint()
    assert [(q.text, q.relevance) for q in short.queries] == [
        ("pet Ana adopt", loaded.queries[0].relevance),
        ("Cat name photo", loaded.queries[1].relevance),
    ]


def test_negatives_never_come_from_the_same_dataset(tmp_path: Path) -> None:
    conv = tmp_path / "conv.json"
    conv.write_text(json.dumps(CONVERSATION))
    beir = tmp_path / "beir"
    beir.mkdir()
    (beir / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "title": "", "text": "Cats purr."}) + "\n")
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "Do cats purr?"}) + "\n")
    (beir / "qrels").mkdir()
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    episodes, transcript, web = load_set(conv), load_set(conv, "transcript"), load_set(beir)
    sets = [episodes, short_queries(episodes), transcript, short_queries(transcript), web, short_queries(web)]
    names = {s.name: s for s in sets}

    def sources(name: str) -> list[str]:
        return [s.name for s in negative_sources(names[name], [s for s in sets if s.name != name])]

    # Its own short questions and its other import style ask about the same memories: not negatives.
    assert sources("conv") == ["beir", "beir-short"]
    assert sources("conv-transcript") == ["beir", "beir-short"]
    # The web set hears the conversation's questions once per text, whichever style loaded them.
    assert sources("beir") == ["conv", "conv-short"]
    # A short set shares its tenant with the set it was cut from, which asks the negatives there.
    assert sources("conv-short") == []
