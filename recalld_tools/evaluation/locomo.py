"""Loading a LoCoMo conversation file: turns as episodes, questions with their evidence turns."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

# How turns are stored: "episodes" as an agent would (`speaker: text`, one second apart),
# "transcript" as a transcript importer would (`Speaker (1:56 pm on 8 May, 2023): text`, every turn
# of a session at the session's date, so only write order keeps the conversation's order).
TurnFormat = Literal["episodes", "transcript"]

# "1:56 pm on 8 May, 2023": LoCoMo's session time stamps.
_SESSION_TIME = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})\s*$", re.I)
_MONTHS = {
    name: number
    for number, name in enumerate(
        (
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        ),
        start=1,
    )
}
# Evidence lists sometimes pack several turn ids into one string ("D8:6; D9:17").
_DIA_ID = re.compile(r"D\d+:\d+")


@dataclass(frozen=True, slots=True)
class Turn:
    """One utterance, stored as an episode of its conversation's agent."""

    id: str
    agent: str
    session_id: str
    created_at: datetime
    content: str


@dataclass(frozen=True, slots=True)
class Question:
    """A question asked in its conversation's scope, with the turns that answer it."""

    id: str
    text: str
    agent: str
    evidence: frozenset[str]
    category: int
    # The conversation's speakers named in the question (negatives ask it where they never spoke).
    names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ConversationSet:
    """Every conversation's turns and the questions that have evidence (categories 1–4)."""

    turns: list[Turn]
    questions: list[Question]
    # Each conversation's agent, in file order.
    agents: tuple[str, ...] = ()


def parse_session_time(text: str) -> datetime:
    """LoCoMo's "1:56 pm on 8 May, 2023" as a UTC datetime."""
    match = _SESSION_TIME.match(text)
    if match is None or match[5].lower() not in _MONTHS:
        raise ValueError(f"unrecognised LoCoMo session time {text!r}")
    hour = int(match[1]) % 12 + (12 if match[3].lower() == "pm" else 0)
    return datetime(int(match[6]), _MONTHS[match[5].lower()], int(match[4]), hour, int(match[2]), tzinfo=UTC)


def _turn_content(turn: dict[str, Any], turn_format: TurnFormat, session_time: str) -> str:
    if turn_format == "transcript":
        return f"{turn['speaker']} ({session_time.strip()}): {turn['text']}"
    # What an agent would keep of a turn: who said it, what was said, and what picture was shared.
    content = f"{turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    if caption:
        content += f" [shared {caption}]"
    return content


def _sessions(conversation: dict[str, Any]) -> list[tuple[str, str, list[dict[str, Any]]]]:
    sessions = []
    for key, turns in conversation.items():
        number = key.removeprefix("session_")
        if key.startswith("session_") and number.isdigit() and isinstance(turns, list):
            sessions.append((number, str(conversation[f"session_{number}_date_time"]), turns))
    return sorted(sessions, key=lambda s: int(s[0]))


def load_locomo(path: Path, turn_format: TurnFormat = "episodes") -> ConversationSet:
    """Read a LoCoMo JSON file (a list of conversations, or a folder holding one)."""
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if len(files) != 1:
            raise FileNotFoundError(f"{path} should hold exactly one LoCoMo .json file")
        path = files[0]
    samples = json.loads(path.read_text())
    if not isinstance(samples, list) or not all("conversation" in s and "qa" in s for s in samples):
        raise ValueError(f"{path} is not a LoCoMo file: expected a list of {{conversation, qa}}")
    turns: list[Turn] = []
    questions: list[Question] = []
    agents: list[str] = []
    for sample in samples:
        agent = str(sample["sample_id"])
        agents.append(agent)
        conversation = sample["conversation"]
        speakers = tuple(str(conversation[k]) for k in ("speaker_a", "speaker_b") if k in conversation)
        for number, session_time, session in _sessions(conversation):
            started = parse_session_time(session_time)
            for position, turn in enumerate(session):
                turns.append(
                    Turn(
                        id=f"{agent}:{turn['dia_id']}",
                        agent=agent,
                        session_id=f"{agent}:session_{number}",
                        # Episodes: a second per turn keeps the conversation's order in created_at.
                        created_at=started + timedelta(seconds=position if turn_format == "episodes" else 0),
                        content=_turn_content(turn, turn_format, session_time),
                    )
                )
        for index, qa in enumerate(sample["qa"]):
            evidence = frozenset(f"{agent}:{d}" for e in qa.get("evidence", []) for d in _DIA_ID.findall(e))
            if evidence and int(qa["category"]) != 5:
                text = str(qa["question"])
                names = tuple(n for n in speakers if re.search(rf"\b{re.escape(n)}\b", text))
                questions.append(
                    Question(f"{agent}:q{index}", text, agent, evidence, int(qa["category"]), names)
                )
    return ConversationSet(turns=turns, questions=questions, agents=tuple(agents))
