"""Bodies of the code index and code_research."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.api.schemas.common import StrictModel
from app.ingest.paths import MAX_CODE_FILE_CHARS
from app.input_rules import Integer
from app.services import code as code_service

RepositoryName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@/:-]*$",
        description="Repository name; files, symbols and code search are grouped by it.",
    ),
]


class CodeFileIn(StrictModel):
    """One source file."""

    path: str = Field(
        ..., description="Path relative to the repository root, e.g. Sources/Auth/AuthService.swift."
    )
    content: str = Field(
        ..., max_length=MAX_CODE_FILE_CHARS, description="File text (≤ 1,048,576 characters)."
    )


class CodeFilesIn(StrictModel):
    """Source files of one repository; unchanged files (same content hash) are skipped."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "repository": "ios-app",
                    "files": [
                        {
                            "path": "Sources/Auth/Auth.swift",
                            "content": "protocol AuthProtocol { func login() }",
                        }
                    ],
                }
            ]
        },
    )
    repository: RepositoryName
    files: list[CodeFileIn] = Field(..., min_length=1, max_length=500, description="1–500 files.")


class ResearchIn(StrictModel):
    """A structural question, in words or structured."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"query": "implementations of AuthProtocol"},
                {"kind": "callers", "symbol": "login", "depth": 2, "repository": "ios-app"},
            ]
        },
    )
    query: str | None = Field(
        None,
        max_length=1000,
        description="'implementations of X', 'what calls X()', 'what does X call', 'related to X', "
        "'dependencies of module M'.",
    )
    kind: Literal["implementations", "callers", "callees", "related", "dependencies"] | None = Field(
        None, description="Structured question kind (with `symbol`), instead of `query` in words."
    )
    symbol: str | None = Field(
        None, max_length=200, description="Symbol (or module directory for dependencies)."
    )
    depth: Integer = Field(2, ge=1, le=5, description="How far callers/callees are traced.")
    repository: str | None = Field(None, max_length=200, description="Only this repository.")

    @model_validator(mode="after")
    def _question_given(self) -> ResearchIn:
        if self.query is None and (self.kind is None or self.symbol is None):
            raise ValueError("send either `query` in words, or both `kind` and `symbol`")
        return self


class CodeIndexOut(BaseModel):
    """What a code upload did."""

    repository: str = Field(..., description="The repository indexed.")
    files: int = Field(..., description="Files parsed and stored.")
    skipped: int = Field(..., description="Files left as they were (same content hash).")
    chunks: int = Field(..., description="Chunks stored.")
    embedded: int = Field(..., description="Chunks embedded.")
    symbols: int = Field(..., description="Symbols declared in the stored chunks.")
    edges: int = Field(..., description="References between symbols (calls, conformances, imports).")
    unsupported: list[str] = Field(..., description="Paths of languages the parser does not know.")


class CodeFileListing(BaseModel):
    """An indexed file."""

    path: str = Field(..., description="Path as indexed.")
    content_hash: str = Field(..., description="SHA-256 of the file, hex.")


class CodeFileList(BaseModel):
    """Indexed files of a repository, by path."""

    repository: str = Field(..., description="The repository.")
    files: list[CodeFileListing] = Field(..., description="Indexed files, by path.")


class ResearchOut(BaseModel):
    """code_research answer."""

    kind: str = Field(..., description="The question's kind, as asked or as read from `query`.")
    symbol: str = Field(..., description="The symbol (or module) asked about.")
    items: list[dict[str, Any]] = Field(
        ..., description="Each with `symbol`, `path`, `start_line`, `end_line`, `relation`, `chunk_id`."
    )


def index_body(repository: str, stats: code_service.IngestStats) -> dict[str, Any]:
    """The code_index_files answer (REST body and MCP result alike)."""
    return {
        "repository": repository,
        "files": stats.files,
        "skipped": stats.skipped,
        "chunks": stats.chunks,
        "embedded": stats.embedded,
        "symbols": stats.symbols,
        "edges": stats.edges,
        "unsupported": stats.unsupported,
    }


def listing_body(repository: str, files: dict[str, str]) -> dict[str, Any]:
    """The code_list_files answer: paths in order, each with its content hash."""
    return {
        "repository": repository,
        "files": [{"path": p, "content_hash": h} for p, h in sorted(files.items())],
    }
