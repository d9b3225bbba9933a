"""Markdown memory files: upload, slice, delete, list."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

from app.api.operation import Mcp, Operation, Rest, routes
from app.api.schemas.documents import DocumentIn, DocumentList, DocumentOut, DocumentSlice, upload_body
from app.api.schemas.parameters import DocumentDeleted, DocumentPathIn, DocumentSliceIn, NoArguments
from app.auth import Principal
from app.infra.db import Database
from app.ingest.paths import MAX_PATH_CHARS
from app.services import documents as service
from app.state import ServiceState

PathQuery = Annotated[
    str,
    Query(
        max_length=MAX_PATH_CHARS,
        description="Path as uploaded.",
        openapi_examples={"example": {"value": "memory/2026-11-20.md"}},
    ),
]


async def _slice(
    path: PathQuery,
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
) -> DocumentSliceIn:
    return DocumentSliceIn.model_construct(path=path, from_line=from_line, lines=lines)


async def _path(path: PathQuery) -> DocumentPathIn:
    return DocumentPathIn.model_construct(path=path)


async def _none() -> NoArguments:
    return NoArguments()


async def _put(state: ServiceState, db: Database, who: Principal, args: DocumentIn) -> dict[str, Any]:
    result = await service.upload_document(
        db, state.embedder, who, path=args.path, content=args.content, scope=args.scope, quota=state.quota
    )
    return upload_body(result)


async def _get(state: ServiceState, db: Database, who: Principal, args: DocumentSliceIn) -> dict[str, Any]:
    return await service.read_slice(db, who, path=args.path, start=args.from_line, lines=args.lines)


async def _list(state: ServiceState, db: Database, who: Principal, args: NoArguments) -> dict[str, Any]:
    return {"documents": await service.list_paths(db, who)}


async def _delete(state: ServiceState, db: Database, who: Principal, args: DocumentPathIn) -> dict[str, Any]:
    await service.delete(db, who, path=args.path)
    return {"path": args.path, "deleted": True}


OPERATIONS = (
    Operation(
        "document_put",
        "writer",
        DocumentIn,
        DocumentOut,
        _put,
        Rest(
            "PUT",
            "/documents",
            "Upload a markdown memory file",
            "Chunk (~400 tokens, 80 overlap, whole lines), embed changed chunks, replace the file's chunks "
            "atomically.",
            responses={
                403: {"description": "Needs the writer role."},
                422: {"description": "Bad path (absolute, '..', not markdown/text) or content."},
            },
        ),
        Mcp(
            "Store or replace a markdown memory file (MEMORY.md, memory/YYYY-MM-DD.md); search finds "
            "its chunks.",
            "documents",
            "replace",
        ),
    ),
    Operation(
        "document_get",
        "reader",
        DocumentSliceIn,
        DocumentSlice,
        _get,
        Rest(
            "GET",
            "/documents",
            "Read lines of a stored file",
            "memory_get for files: the whole file, or `lines` lines starting at `from`.",
            params=_slice,
            responses={404: {"description": "No such file in this tenant."}},
        ),
        Mcp("Lines of a stored memory file (the whole file without from/lines).", "documents", "read"),
    ),
    Operation(
        "document_list",
        "reader",
        NoArguments,
        DocumentList,
        _list,
        Rest(
            "GET",
            "/documents:list",
            "List stored files",
            "Every stored path with its content hash.",
            params=_none,
        ),
        Mcp("Every stored memory file.", "documents", "read"),
    ),
    Operation(
        "document_delete",
        "writer",
        DocumentPathIn,
        DocumentDeleted,
        _delete,
        Rest(
            "DELETE",
            "/documents",
            "Forget a file",
            "Delete a file and its chunks.",
            status_code=204,
            params=_path,
            responses={
                403: {"description": "Needs the writer role."},
                404: {"description": "No such file in this tenant."},
            },
        ),
        Mcp("Delete a memory file.", "documents", "delete"),
    ),
)

router = routes(OPERATIONS, prefix="/v1", tags=["documents"])
