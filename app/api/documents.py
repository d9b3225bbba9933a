"""Markdown memory files: upload, slice, delete, list."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from app.api.deps import DbDep, Reader, StateDep, Writer
from app.api.schemas.documents import DocumentIn, DocumentList, DocumentOut, DocumentSlice, upload_body
from app.ingest.paths import MAX_PATH_CHARS
from app.services import documents as service

router = APIRouter(prefix="/v1", tags=["documents"])


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
async def put_document(body: DocumentIn, state: StateDep, db: DbDep, principal: Writer) -> dict[str, Any]:
    """Chunk (~400 tokens, 80 overlap, whole lines), embed changed chunks, replace the file's chunks atomically."""
    result = await service.upload_document(
        db,
        state.embedder,
        principal,
        path=body.path,
        content=body.content,
        scope=body.scope,
        quota=state.quota,
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
    db: DbDep,
    principal: Reader,
    path: Annotated[
        str,
        Query(
            max_length=MAX_PATH_CHARS,
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
    return await service.read_slice(db, principal, path=path, start=from_line, lines=lines)


@router.get(
    "/documents:list",
    response_model=DocumentList,
    operation_id="document_list",
    summary="List stored files",
)
async def list_documents(db: DbDep, principal: Reader) -> dict[str, Any]:
    """Every stored path with its content hash."""
    return {"documents": await service.list_paths(db, principal)}


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
    db: DbDep,
    principal: Writer,
    path: Annotated[
        str,
        Query(
            max_length=MAX_PATH_CHARS,
            description="Path as uploaded.",
            openapi_examples={"example": {"value": "memory/2026-11-20.md"}},
        ),
    ],
) -> Response:
    """Delete a file and its chunks."""
    await service.delete(db, principal, path=path)
    return Response(status_code=204)
