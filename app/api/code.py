"""Code index: upload source files, list/delete them, and code_research."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from app.api.deps import DbDep, Reader, StateDep, Writer
from app.api.schemas.code import CodeFilesIn, ResearchIn, index_body, listing_body
from app.ingest.paths import MAX_PATH_CHARS
from app.services import code as service
from app.services import code_research as research_service

router = APIRouter(prefix="/v1/code", tags=["code"])

RepositoryQuery = Annotated[
    str,
    Query(
        max_length=200,
        description="Repository name as indexed.",
        openapi_examples={"example": {"value": "ios-app"}},
    ),
]


@router.put(
    "/files",
    operation_id="code_index_files",
    summary="Index source files of a repository",
    responses={
        200: {
            "description": "What was indexed.",
            "content": {
                "application/json": {
                    "example": {
                        "repository": "ios-app",
                        "files": 1,
                        "skipped": 0,
                        "chunks": 2,
                        "embedded": 2,
                        "symbols": 2,
                        "edges": 1,
                        "unsupported": [],
                    }
                }
            },
        },
        422: {"description": "Bad path or body."},
    },
)
async def put_files(body: CodeFilesIn, state: StateDep, db: DbDep, principal: Writer) -> dict[str, Any]:
    """Parse at symbol boundaries (Swift, Python, TypeScript/JavaScript, Go), embed, store symbols and edges."""
    stats = await service.ingest_files(
        db,
        state.embedder,
        principal,
        repository=body.repository,
        files=[(f.path, f.content) for f in body.files],
        quota=state.quota,
    )
    return index_body(body.repository, stats)


@router.get(
    "/files",
    operation_id="code_list_files",
    summary="List indexed files of a repository",
    responses={
        200: {
            "description": "Indexed paths with their content hashes.",
            "content": {
                "application/json": {
                    "example": {
                        "repository": "ios-app",
                        "files": [
                            {
                                "path": "Sources/Auth/Auth.swift",
                                "content_hash": "9f2c0e5d8a1b4c3e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e",
                            }
                        ],
                    }
                }
            },
        }
    },
)
async def list_files(db: DbDep, principal: Reader, repository: RepositoryQuery) -> dict[str, Any]:
    """Every indexed path with its content hash."""
    files = await service.list_files(db, principal, repository=repository)
    return listing_body(repository, files)


@router.delete(
    "/files",
    status_code=204,
    operation_id="code_delete_file",
    summary="Remove a file from the index",
    responses={404: {"description": "Not indexed in this tenant."}},
)
async def delete_file(
    db: DbDep,
    principal: Writer,
    repository: RepositoryQuery,
    path: Annotated[
        str,
        Query(
            max_length=MAX_PATH_CHARS,
            description="Path as indexed.",
            openapi_examples={"example": {"value": "Sources/Auth/Auth.swift"}},
        ),
    ],
) -> Response:
    """Forget a file's chunks, symbols and edges."""
    await service.delete_file(db, principal, repository=repository, path=path)
    return Response(status_code=204)


@router.post(
    "/research",
    operation_id="code_research",
    summary="Structural questions about indexed code",
    responses={
        200: {
            "description": "The answer: each item with its path, lines and relation.",
            "content": {
                "application/json": {
                    "example": {
                        "kind": "implementations",
                        "symbol": "AuthProtocol",
                        "items": [
                            {
                                "symbol": "AuthService",
                                "symbol_kind": "class",
                                "parent_symbol": None,
                                "path": "Sources/Auth/AuthService.swift",
                                "start_line": 3,
                                "end_line": 40,
                                "relation": "conforms",
                                "chunk_id": "0b7e6a52-4a8e-4f0e-9a59-2f0f3d1c8e11",
                            }
                        ],
                    }
                }
            },
        },
        422: {"description": "Question not understood."},
    },
)
async def code_research(body: ResearchIn, db: DbDep, principal: Reader) -> dict[str, Any]:
    """Implementations (incl. extension conformances), callers/callees with chains, related components, module dependencies."""
    return await research_service.answer(
        db,
        principal,
        query=body.query,
        kind=body.kind,
        symbol=body.symbol,
        depth=body.depth,
        repository=body.repository,
    )
