"""Inputs of the operations that REST takes from the path or the query string, and the results of
those REST answers with 204 (an MCP tool takes and answers JSON objects)."""

from __future__ import annotations

from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from app.api.schemas.code import RepositoryName
from app.api.schemas.common import MemoryType, ScopeName, StrictModel, Timestamp
from app.ingest.paths import MAX_PATH_CHARS
from app.services.scopes import ScopeSettings

# Arguments of the operations whose REST form takes them from the path or the query string.


class MemoryIdIn(StrictModel):
    """Arguments naming one memory."""

    id: UUID = Field(..., description="Id of the memory (from a write or a search).")


class MemoryListIn(StrictModel):
    """memory_list arguments: one kind, optionally one scope, a page at a time."""

    type: MemoryType = Field(..., description="Kind to list: fact, rule, episode, document or code.")
    scope: ScopeName | None = Field(None, description="Only memories stored with exactly this scope.")
    limit: int = Field(20, ge=1, le=100, description="Most memories on this page, 1–100 (default 20).")
    cursor: str | None = Field(
        None, max_length=200, description="`next_cursor` of the previous page; omit for the first page."
    )
    as_of: Timestamp | None = Field(
        None, description="Only what was valid at this time (superseded included)."
    )


class DocumentPathIn(StrictModel):
    """Arguments naming one stored file."""

    path: str = Field(..., max_length=MAX_PATH_CHARS, description="Path as uploaded.")


class DocumentSliceIn(DocumentPathIn):
    """document_get arguments: the whole file, or `lines` lines from `from`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_line: int | None = Field(None, alias="from", ge=1, description="First line (1-based); default 1.")
    lines: int | None = Field(None, ge=1, le=100_000, description="How many lines; default to the end.")


class NoArguments(StrictModel):
    """A tool without arguments."""


class ScopeIn(StrictModel):
    """Arguments naming one scope."""

    scope: ScopeName


class ScopeSettingsIn(ScopeIn):
    """scope_settings_put arguments."""

    settings: ScopeSettings = Field(..., description="The scope's new settings (replacing earlier ones).")


class RepositoryIn(StrictModel):
    """Arguments naming one repository."""

    repository: RepositoryName


class CodeFileRefIn(RepositoryIn):
    """Arguments naming one indexed source file."""

    path: str = Field(..., max_length=MAX_PATH_CHARS, description="Path as indexed.")


# What the tools answer where REST answers 204 or has no response model: MCP results are objects.


class MemoryForgotten(BaseModel):
    """memory_forget result."""

    id: UUID
    forgotten: bool


class DocumentDeleted(BaseModel):
    """document_delete result."""

    path: str
    deleted: bool


class CodeFileDeleted(BaseModel):
    """code_delete_file result."""

    repository: str
    path: str
    deleted: bool
