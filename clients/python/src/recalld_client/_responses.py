"""Response bodies: memories and writes, search and recall, files and code, errors."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import Field

from recalld_client._model_base import MemoryType, _Response


class _KindFields(_Response):
    """Fields of one kind of memory (facts and rules, episodes, document chunks, code chunks)."""

    subject: str | None = None
    predicate: str | None = None
    confidence: float | None = None
    decay_rate: float | None = None
    last_confirmed_at: datetime | None = None
    validity: str | None = None
    supersedes: UUID | None = None
    superseded_by: UUID | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    effective_confidence: float | None = None
    butler: str | None = None
    session_id: str | None = None
    expires_at: datetime | None = None
    path: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    repository: str | None = None
    symbol: str | None = None
    symbol_kind: str | None = None
    language: str | None = None
    parent_symbol: str | None = None


class MemoryOut(_KindFields):
    """A stored memory, with the fields of its kind (the others are None)."""

    id: UUID
    type: MemoryType
    content: str
    importance: float
    scope: str
    tags: list[str]
    metadata: dict[str, Any]
    created_at: datetime
    reference_count: int
    last_referenced_at: datetime | None


class SimilarMemory(_Response):
    """An active memory close to what was written, though not the same after normalisation."""

    id: UUID
    similarity: float
    word_overlap: float


class MemoryWriteOut(MemoryOut):
    """A write's answer: the memory, and what the write did besides storing it.

    `duplicate_of` is set when the write repeated an active memory (that memory answers; nothing new
    was stored); `superseded` lists the ids the write replaced; `similar_to` its near-duplicates.
    """

    duplicate_of: UUID | None
    superseded: list[UUID]
    similar_to: list[SimilarMemory]


class BatchOut(_Response):
    """One answer per request item, in request order."""

    items: list[MemoryWriteOut]


class MemoryHistory(_Response):
    """A supersession chain: the memory and what it replaced or was replaced by, newest first."""

    items: list[MemoryOut]


class MemoryPage(_Response):
    """One page of memory_list; pass `next_cursor` as `cursor` for the next (None on the last)."""

    items: list[MemoryOut]
    next_cursor: str | None


class ContextTurn(_Response):
    """A neighbouring turn of an episode hit in its session."""

    id: UUID
    content: str
    metadata: dict[str, Any]
    created_at: datetime
    offset: int


class SearchResult(_KindFields):
    """One search hit: the memory's fields, its score and why it ranked there."""

    id: UUID
    type: MemoryType
    content: str
    score: float
    match_type: str
    highlights: list[tuple[int, int]]
    scope: str
    created_at: datetime
    score_breakdown: dict[str, Any]
    context: list[ContextTurn] | None = None
    importance: float | None = None
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    reference_count: int | None = None
    last_referenced_at: datetime | None = None


class RerankReport(_Response):
    """Whether the reranker re-ordered a search."""

    applied: bool
    provider: str | None = None
    top_n: int
    error: str | None = None


class SearchOut(_Response):
    """memory_search answer."""

    results: list[SearchResult]
    mode: str
    keyword_ranker: str
    embedding_used: bool
    rerank: RerankReport | None = None
    abstained: bool = False
    best_score: float | None = None


class RecallResult(_KindFields):
    """A recalled fact or rule with each signal of its composite score."""

    id: UUID
    type: MemoryType
    content: str
    score: float
    relevance: float
    importance: float
    recency: float
    effective_confidence: float  # always set for facts and rules
    scope: str | None = None
    tags: list[str] | None = None
    metadata: dict[str, Any] | None = None
    created_at: datetime | None = None
    reference_count: int | None = None
    last_referenced_at: datetime | None = None


class RecallOut(_Response):
    """memory_recall answer."""

    results: list[RecallResult]
    weights: dict[str, float]
    embedding_used: bool
    abstained: bool = False
    best_score: float | None = None


class DocumentOut(_Response):
    """What document_put did."""

    path: str
    chunks: int
    embedded: int
    unchanged: bool


class DocumentSlice(_Response):
    """Lines of a stored file (`from_line` is the API's `from`)."""

    path: str
    from_line: int = Field(alias="from")
    to: int
    total_lines: int
    content: str
    content_hash: str


class DocumentListing(_Response):
    """A stored file."""

    path: str
    content_hash: str


class DocumentList(_Response):
    """Every stored file of the tenant."""

    documents: list[DocumentListing]


class CodeIndexOut(_Response):
    """What code_index_files did."""

    repository: str
    files: int
    skipped: int
    chunks: int
    embedded: int
    symbols: int
    edges: int
    unsupported: list[str]


class CodeFileListing(_Response):
    """An indexed source file."""

    path: str
    content_hash: str


class CodeFileList(_Response):
    """Indexed files of a repository."""

    repository: str
    files: list[CodeFileListing]


class ResearchItem(_Response):
    """One symbol in a code_research answer, with where it is and how it relates."""

    symbol: str | None = None
    symbol_kind: str | None = None
    parent_symbol: str | None = None
    path: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    relation: str | None = None
    chunk_id: UUID | None = None


class ResearchOut(_Response):
    """code_research answer."""

    kind: str
    symbol: str | None = None
    items: list[ResearchItem] = Field(default_factory=list)


class ErrorDetail(_Response):
    """The `error` object of every error answer."""

    code: str
    message: str
    details: Any = None


class ErrorOut(_Response):
    """Every error answer has this shape."""

    error: ErrorDetail
