"""Bodies of memory writes and memory_get."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.api.schemas.common import (
    Content,
    FutureTimestamp,
    MemoryType,
    Metadata,
    PastTimestamp,
    ScopeName,
    StrictModel,
    Tag,
    Timestamp,
)
from app.input_rules import Number
from app.services import requests


class MemoryCommon(StrictModel):
    """Fields every written memory has."""

    content: Content
    importance: Number = Field(5.0, ge=0, le=10, description="How much this matters, 0–10.")
    scope: ScopeName = "global"
    tags: list[Tag] = Field(default_factory=list, max_length=64, description="Free-form labels.")
    metadata: Metadata = Field(
        default_factory=dict,
        description="Any JSON object, returned as stored (≤ 16 KiB as JSON, ≤ 256 keys, ≤ 32 levels).",
    )
    idempotency_key: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="Retrying a write with the same key returns the first result instead of a duplicate.",
    )
    created_at: PastTimestamp | None = Field(
        None, description="When it happened; defaults to now (set it when importing older memories)."
    )

    def _draft(
        self, kind: requests.MemoryKind, *, scope: str | None = None, **fields: Any
    ) -> requests.MemoryDraft:
        return requests.MemoryDraft(
            kind=kind,
            content=self.content,
            importance=self.importance,
            scope=scope or self.scope,
            tags=self.tags,
            metadata=self.metadata,
            idempotency_key=self.idempotency_key,
            created_at=self.created_at,
            **fields,
        )


class FactIn(MemoryCommon):
    """A fact: subject–predicate–content with a confidence that fades unless confirmed."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "content": "User is lactose intolerant",
                    "subject": "user",
                    "predicate": "diet",
                    "importance": 8,
                    "scope": "health",
                    "tags": ["diet"],
                }
            ]
        },
    )
    subject: str | None = Field(None, max_length=200, description="What the fact is about.")
    predicate: str | None = Field(None, max_length=200, description="Which property of the subject.")
    confidence: Number = Field(1.0, ge=0, le=1, description="Belief at last confirmation, 0–1.")
    decay_rate: Number = Field(0.008, ge=0, le=10, description="Confidence decay per day (0 = permanent).")
    last_confirmed_at: PastTimestamp | None = Field(None, description="Defaults to creation time.")
    supersedes: UUID | None = Field(
        None, description="Id of a fact this one replaces; it becomes superseded."
    )
    supersede: Literal["subject_predicate"] | None = Field(
        None,
        description='"subject_predicate": this fact replaces the active facts with the same subject and '
        "predicate in its scope (they become superseded; the answer lists them in `superseded`). "
        "Needs subject and predicate. The scope setting `single_valued_predicates` does this without asking.",
    )
    valid_from: Timestamp | None = Field(
        None, description="Since when it is true; defaults to `created_at` (when written)."
    )
    valid_to: Timestamp | None = Field(
        None,
        description="Until when it was true, if it already ended; later than valid_from. Set by "
        "supersession otherwise. Searches without `as_of` leave out facts whose valid_to has passed.",
    )

    def to_draft(self) -> requests.MemoryDraft:
        """The service's view of this fact."""
        return self._draft(
            "fact",
            subject=self.subject,
            predicate=self.predicate,
            confidence=self.confidence,
            decay_rate=self.decay_rate,
            last_confirmed_at=self.last_confirmed_at,
            supersedes=self.supersedes,
            supersede=self.supersede,
            valid_from=self.valid_from,
            valid_to=self.valid_to,
        )


class RuleIn(MemoryCommon):
    """A rule or learned preference; like a fact without subject/predicate."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"content": "Always answer in British English", "importance": 6}]},
    )
    confidence: Number = Field(0.5, ge=0, le=1, description="Belief at last confirmation, 0–1.")
    decay_rate: Number = Field(0.008, ge=0, le=10, description="Confidence decay per day (0 = permanent).")
    last_confirmed_at: PastTimestamp | None = Field(None, description="Defaults to creation time.")
    supersedes: UUID | None = Field(None, description="Id of a rule this one replaces.")
    valid_from: Timestamp | None = Field(
        None, description="Since when it holds; defaults to `created_at` (when written)."
    )
    valid_to: Timestamp | None = Field(
        None, description="Until when it held, if it already ended; later than valid_from."
    )

    def to_draft(self) -> requests.MemoryDraft:
        """The service's view of this rule."""
        return self._draft(
            "rule",
            confidence=self.confidence,
            decay_rate=self.decay_rate,
            last_confirmed_at=self.last_confirmed_at,
            supersedes=self.supersedes,
            valid_from=self.valid_from,
            valid_to=self.valid_to,
        )


class EpisodeIn(MemoryCommon):
    """Something an agent lived through; expires (default 7 days)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"content": "Booked a table at Luigi's for Friday", "butler": "concierge"}]
        },
    )
    butler: ScopeName = Field(..., description="The agent that lived it; scope filters match on it.")
    session_id: str | None = Field(
        None, max_length=200, description="The conversation or run the episode belongs to."
    )
    expires_at: FutureTimestamp | None = Field(
        None, description="Defaults to now + 7 days; must be in the future; expired episodes vanish."
    )

    @model_validator(mode="after")
    def _scope_is_the_butler(self) -> EpisodeIn:
        # Search and list filter an episode by its butler (the recall seed's `butler = scope`):
        # a different scope would file it under one name for listing and another for search.
        if "scope" in self.model_fields_set and self.scope != self.butler:
            raise ValueError(
                f"an episode's scope is its butler: scope {self.scope!r} differs from butler "
                f"{self.butler!r}; leave scope out or send the butler's name"
            )
        return self

    def to_draft(self) -> requests.MemoryDraft:
        """The service's view of this episode (stored under its butler's scope)."""
        return self._draft(
            "episode",
            scope=self.butler,
            butler=self.butler,
            session_id=self.session_id,
            expires_at=self.expires_at,
        )


class BatchFact(FactIn):
    """A fact in a batch."""

    type: Literal["fact"] = Field(..., description="Kind of this item: `fact`.")


class BatchRule(RuleIn):
    """A rule in a batch."""

    type: Literal["rule"] = Field(..., description="Kind of this item: `rule`.")


class BatchEpisode(EpisodeIn):
    """An episode in a batch."""

    type: Literal["episode"] = Field(..., description="Kind of this item: `episode`.")


BatchItem = Annotated[BatchFact | BatchRule | BatchEpisode, Field(discriminator="type")]


class BatchIn(StrictModel):
    """Up to 1,000 memories written all-or-nothing."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "items": [
                        {"type": "fact", "content": "User's sister is called Ana", "subject": "user"},
                        {"type": "rule", "content": "Never book flights before 8am"},
                    ]
                }
            ]
        },
    )
    items: list[BatchItem] = Field(
        ...,
        min_length=1,
        max_length=1000,
        description="1–1,000 memories, each with `type` (fact, rule or episode) and the fields of that kind.",
    )


FACT_EXAMPLE: dict[str, Any] = {
    "id": "5a4744e1-b384-42ad-b3e8-ea224528b272",
    "type": "fact",
    "content": "User experiences nausea after dairy",
    "importance": 8.0,
    "scope": "health",
    "tags": ["diet"],
    "metadata": {},
    "created_at": "2026-11-20T09:30:00Z",
    "reference_count": 0,
    "last_referenced_at": None,
    "subject": "user",
    "predicate": None,
    "confidence": 1.0,
    "decay_rate": 0.008,
    "last_confirmed_at": "2026-11-20T09:30:00Z",
    "validity": "active",
    "supersedes": None,
    "superseded_by": None,
    "valid_from": "2026-11-20T09:30:00Z",
    "valid_to": None,
    "effective_confidence": 1.0,
}
WRITE_EXAMPLE: dict[str, Any] = {**FACT_EXAMPLE, "duplicate_of": None, "superseded": [], "similar_to": []}


class MemoryOut(BaseModel):
    """A stored memory, with the fields of its kind."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "description": "A stored memory. Facts and rules add `confidence`, `decay_rate`, "
            "`last_confirmed_at`, `validity`, `supersedes`, `superseded_by`, `valid_from`, `valid_to`, "
            "`effective_confidence` (facts also "
            "`subject`, `predicate`); episodes add `butler`, `session_id`, `expires_at`; document "
            "chunks add `path`, `start_line`, `end_line`.",
            "examples": [FACT_EXAMPLE],
        },
    )
    id: UUID = Field(..., description="The memory's id (UUID).")
    type: MemoryType = Field(..., description="fact, rule, episode, document or code.")
    content: str = Field(..., description="The memory text.")
    importance: float = Field(..., description="How much this matters, 0–10.")
    scope: str = Field(..., description="Scope it was stored in (`global` unless set).")
    tags: list[str] = Field(..., description="Labels given when it was stored.")
    metadata: dict[str, Any] = Field(..., description="The JSON object given when it was stored.")
    created_at: datetime = Field(..., description="When it was stored (or the `created_at` given).")
    reference_count: int = Field(
        ..., description="How often search, recall or get returned it (this response included)."
    )
    last_referenced_at: datetime | None = Field(
        ..., description="When it was last returned by search, recall or get; null if never."
    )


class SimilarMemory(BaseModel):
    """An active memory close to what was written (not the same after normalisation)."""

    id: UUID = Field(..., description="The similar memory's id.")
    similarity: float = Field(..., description="Cosine similarity of the two embeddings, 0–1.")
    word_overlap: float = Field(..., description="Jaccard overlap of the two normalised word sets, 0–1.")


class MemoryWriteOut(MemoryOut):
    """A write's answer: the memory, and what the write did besides storing it."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [WRITE_EXAMPLE]})
    duplicate_of: UUID | None = Field(
        ...,
        description="Set when the content (normalised: case, whitespace, Unicode form, trailing "
        "punctuation) repeats an active memory of the same kind, scope and subject/butler: that memory "
        "answers (its id, confirmed) and nothing new is stored. Null for a new memory.",
    )
    superseded: list[UUID] = Field(
        ..., description="Ids this write marked superseded (by `supersedes`, or by subject and predicate)."
    )
    similar_to: list[SimilarMemory] = Field(
        ...,
        description="Active near-duplicates of the same kind, scope and subject/butler, most similar first.",
    )


class BatchOut(BaseModel):
    """The stored memories, in request order."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"items": [WRITE_EXAMPLE]}]})
    items: list[MemoryWriteOut] = Field(..., description="One answer per request item, same order.")


class MemoryHistory(BaseModel):
    """A supersession chain."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"items": [FACT_EXAMPLE]}]})
    items: list[MemoryOut] = Field(
        ..., description="The memory and every memory it replaced or was replaced by, newest first."
    )


class MemoryPage(BaseModel):
    """One page of a tenant's memories of one kind, newest first."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"items": [FACT_EXAMPLE], "next_cursor": "MjAyNi0xMS0yMFQw..."}]}
    )
    items: list[MemoryOut] = Field(..., description="Newest first; ties by id.")
    next_cursor: str | None = Field(
        ..., description="Pass as `cursor` for the next page; null on the last page."
    )
