"""Bodies of the markdown memory file operations."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from app.api.schemas.common import ScopeName, StrictModel
from app.services.documents import UploadResult

MAX_DOCUMENT_CHARS = 4 * 1024 * 1024


class DocumentIn(StrictModel):
    """A markdown memory file, by its path relative to the agent's memory folder."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"path": "memory/2026-11-20.md", "content": "# 2026-11-20\n\n- Met Ana for lunch\n"}]
        },
    )
    # Length is checked with the other path rules, so every bad path is the same 422.
    path: str = Field(..., description="Relative path (≤ 512 chars), e.g. MEMORY.md or memory/2026-11-20.md.")
    content: str = Field(
        ..., max_length=MAX_DOCUMENT_CHARS, description="The whole file (≤ 4,194,304 characters)."
    )
    scope: ScopeName = "global"


class DocumentOut(StrictModel):
    """What the upload did."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"path": "memory/2026-11-20.md", "chunks": 3, "embedded": 1, "unchanged": False}]
        },
    )
    path: str = Field(..., description="The stored path.")
    chunks: int = Field(..., description="Chunks the file has now.")
    embedded: int = Field(..., description="Chunks embedded by this upload (unchanged ones are kept).")
    unchanged: bool = Field(..., description="True when the file was identical to the stored one.")


class DocumentSlice(StrictModel):
    """Lines of a stored file."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra={
            "examples": [
                {
                    "path": "memory/2026-11-20.md",
                    "from": 3,
                    "to": 4,
                    "total_lines": 5,
                    "content": "- Met Ana for lunch\n- Dr. Smith moved the check-up to 2 December",
                    "content_hash": "71130d74c6839069918542f69104509ef4977d63c1a5dc49b039ee033af01d45",
                }
            ]
        },
    )
    path: str = Field(..., description="The stored path.")
    from_line: int = Field(..., alias="from", description="First line returned (1-based).")
    to: int = Field(..., description="Last line returned (inclusive).")
    total_lines: int = Field(..., description="Lines in the whole stored file.")
    content: str = Field(..., description="The returned lines, joined with newlines.")
    content_hash: str = Field(..., description="SHA-256 of the whole file, hex.")


class DocumentListing(StrictModel):
    """A stored file."""

    path: str = Field(..., description="The stored path.")
    content_hash: str = Field(
        ..., description="SHA-256 of the file, hex (`recalld index` skips equal files)."
    )


class DocumentList(StrictModel):
    """Every stored file of the tenant."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "documents": [
                        {
                            "path": "MEMORY.md",
                            "content_hash": "6046ac7d1f034d7c568eb7204ebc6fbeacea3deeb4a7b38ec47639f0da2dd22c",
                        }
                    ]
                }
            ]
        },
    )
    documents: list[DocumentListing] = Field(..., description="Stored files, by path.")


def upload_body(result: UploadResult) -> dict[str, Any]:
    """The document_put answer (REST body and MCP result alike)."""
    return {
        "path": result.path,
        "chunks": result.chunks,
        "embedded": result.embedded,
        "unchanged": result.unchanged,
    }
