"""Markdown memory files: upload, slice, delete, list."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from pydantic import ConfigDict, Field

from app.api.deps import ConnDep, Reader, StateDep, Writer
from app.api.schemas import ScopeName, StrictModel
from app.services import documents as service

router = APIRouter(prefix="/v1", tags=["documents"])
MAX_DOCUMENT_BYTES = 4 * 1024 * 1024


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
    content: str = Field(..., max_length=MAX_DOCUMENT_BYTES, description="The whole file (≤ 4 MiB).")
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


def upload_body(result: service.UploadResult) -> dict[str, Any]:
    """The document_put answer (REST body and MCP result alike)."""
    return {
        "path": result.path,
        "chunks": result.chunks,
        "embedded": result.embedded,
        "unchanged": result.unchanged,
    }


@router.put(
    "/documents",
    response_model=DocumentOut,
    operation_id="document_put",
    summary="Upload a markdown memory file",
    responses={
        403: {"description": "Needs the writer role."},
        422: {"description": "Bad path (absolute, '..', not markdown/text) or content."},
    },
)
async def put_document(body: DocumentIn, state: StateDep, conn: ConnDep, principal: Writer) -> dict[str, Any]:
    """Chunk (~400 tokens, 80 overlap, whole lines), embed changed chunks, replace the file's chunks atomically."""
    result = await service.upload_document(
        conn, state.embedder, principal, path=body.path, content=body.content, scope=body.scope
    )
    return upload_body(result)


@router.get(
    "/documents",
    response_model=DocumentSlice,
    response_model_by_alias=True,
    operation_id="document_get",
    summary="Read lines of a stored file",
    responses={404: {"description": "No such file in this tenant."}},
)
async def get_document(
    conn: ConnDep,
    principal: Reader,
    path: Annotated[
        str,
        Query(
            max_length=512,
            description="Path as uploaded.",
            openapi_examples={"example": {"value": "memory/2026-11-20.md"}},
        ),
    ],
    from_line: Annotated[
        int | None,
        Query(
            alias="from",
            ge=1,
            description="First line (1-based); default 1.",
            openapi_examples={"example": {"value": 3}},
        ),
    ] = None,
    lines: Annotated[
        int | None,
        Query(
            ge=1,
            le=100_000,
            description="How many lines; default to the end of the file.",
            openapi_examples={"example": {"value": 2}},
        ),
    ] = None,
) -> dict[str, Any]:
    """memory_get for files: the whole file, or `lines` lines starting at `from`."""
    return await service.read_slice(conn, principal, path=path, start=from_line, lines=lines)


@router.get(
    "/documents:list",
    response_model=DocumentList,
    operation_id="document_list",
    summary="List stored files",
)
async def list_documents(conn: ConnDep, principal: Reader) -> dict[str, Any]:
    """Every stored path with its content hash."""
    return {"documents": await service.list_paths(conn, principal)}


@router.delete(
    "/documents",
    status_code=204,
    operation_id="document_delete",
    summary="Forget a file",
    responses={
        403: {"description": "Needs the writer role."},
        404: {"description": "No such file in this tenant."},
    },
)
async def delete_document(
    conn: ConnDep,
    principal: Writer,
    path: Annotated[
        str,
        Query(
            max_length=512,
            description="Path as uploaded.",
            openapi_examples={"example": {"value": "memory/2026-11-20.md"}},
        ),
    ],
) -> Response:
    """Delete a file and its chunks."""
    await service.delete(conn, principal, path=path)
    return Response(status_code=204)
