"""A search candidate, one type from the SQL legs to the response, and a leg's ranked list of them."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime

# Where an item stood in one leg: (competition rank, score as fusion took it, index in the leg's
# list); None where the leg did not return it.
_Slot = tuple[int, float, int] | None


class Hit:
    """One candidate memory on its way from a leg to the response.

    A leg makes it (id, its score in that leg, created_at and path for the tie order and decay, the
    duplicate key that keeps two equal texts from both being shown);
    fusion gives it `fused` and the legs it came from (None: found by code expansion, not a leg); the cut gives it its final `score`, its
    `decay` and `match_type`; code expansion its hops. Ids stay UUIDs throughout (asyncpg's, whose
    hash and order are C code); a UUID's order is its text's order, so the tie order is the SQL one.
    """

    # A plain slotted class: a search builds ~200 of these, and a NamedTuple's __new__ cost 3x more.
    __slots__ = (
        "adaptive",
        "content_key",
        "created_at",
        "decay",
        "evidence",
        "fused",
        "hop_depth",
        "id",
        "legs",
        "match_type",
        "path",
        "paths",
        "score",
    )

    def __init__(
        self,
        id: uuid.UUID,
        score: float,
        created_at: datetime,
        path: str | None,
        content_key: bytes | None = None,
    ) -> None:
        self.id = id
        self.score = score
        self.created_at = created_at
        self.path = path
        # app.retrieval.duplicates.content_key of a fact, rule or episode; None for other kinds.
        self.content_key = content_key
        self.fused = 0.0
        # The calibrated fusion's evidence: the query's, as shown (one dict shared by the query's
        # hits), and this hit's adaptive score before calibration; None when not calibrated.
        self.evidence: Mapping[str, float] | None = None
        self.adaptive = 0.0
        self.legs: Mapping[str, Leg] | None = None
        self.decay = 1.0
        self.match_type = ""
        self.hop_depth: int | None = None
        self.paths: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        """Equal when a leg returned the same row with the same score (the later stages' fields aside)."""
        if not isinstance(other, Hit):
            return NotImplemented
        return (self.id, self.score, self.created_at, self.path) == (
            other.id,
            other.score,
            other.created_at,
            other.path,
        )

    # Mutable: compared by value, never a dict key (hits are looked up by id).
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Hit({self.id}, {self.score!r}, {self.created_at.isoformat()}, {self.path!r})"

    def _slots(self) -> list[tuple[str, _Slot]]:
        legs = self.legs or {}
        return [(name, leg.positions.get(self.id)) for name, leg in legs.items()]

    @property
    def ranks(self) -> dict[str, int | None]:
        """Each leg's competition rank of this item (None: not returned by that leg)."""
        return {leg: s[0] if s is not None else None for leg, s in self._slots()}

    @property
    def raw_scores(self) -> dict[str, float | None]:
        """Each leg's score of this item as fusion took it (None: not returned by that leg)."""
        return {leg: s[1] if s is not None else None for leg, s in self._slots()}

    @property
    def legs_found(self) -> list[str]:
        """The legs that returned this item, in leg order."""
        return [leg for leg, s in self._slots() if s is not None]


class Leg:
    """One leg's hits, best first, with the scores fusion takes (each item's rank and first position).

    Built as soon as the leg's rows arrive, so a search prepares its keyword leg while the query
    embedding is still being computed.

    Ranks are competition ranks (1, 2, 2, 4): items a leg cannot tell apart (equal scores, e.g.
    identical text) share a rank, so fusion does not invent a difference between them and the
    documented tie order (created_at DESC, id ASC) decides. A repeat of an item is ignored.
    """

    __slots__ = ("ceiling", "hits", "positions", "scores")

    def __init__(self, hits: Sequence[Hit], scores: Sequence[float]) -> None:
        self.hits = hits
        self.scores = scores
        # The most this leg could score an item for the query (BM25: its terms' ceiling); None: unknown.
        self.ceiling: float | None = None
        positions: dict[uuid.UUID, tuple[int, float, int]] = {}
        rank = 0
        previous: float | None = None
        for position, (hit, raw) in enumerate(zip(hits, scores, strict=True)):
            if previous is None or raw != previous:
                rank = position + 1
                previous = raw
            if hit.id not in positions:
                positions[hit.id] = (rank, raw, position)
        self.positions = positions
