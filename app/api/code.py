"""Code index: upload source files, list/delete them, and code_research."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query

from app.api.operation import Mcp, Operation, Responses, Rest, routes
from app.api.schemas.code import (
    CodeFileList,
    CodeFilesIn,
    CodeIndexOut,
    ResearchIn,
    ResearchOut,
    index_body,
    listing_body,
)
from app.api.schemas.parameters import CodeFileDeleted, CodeFileRefIn, RepositoryIn
from app.auth import Principal
from app.infra.db import Database
from app.ingest.paths import MAX_PATH_CHARS
from app.services import code as service
from app.services import code_research as research_service
from app.state import ServiceState

RepositoryQuery = Annotated[
    str,
    Query(
        max_length=200,
        description="Repository name as indexed.",
        openapi_examples={"example": {"value": "ios-app"}},
    ),
]
# REST documents these answers by example (no response model); the tools by their output model.
_INDEXED: Responses = {
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
}
_LISTING: Responses = {
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
}
_RESEARCHED: Responses = {
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
}


async def _repository(repository: RepositoryQuery) -> RepositoryIn:
    return RepositoryIn.model_construct(repository=repository)


async def _file(
    repository: RepositoryQuery,
    path: Annotated[
        str,
        Query(
            max_length=MAX_PATH_CHARS,
            description="Path as indexed.",
            openapi_examples={"example": {"value": "Sources/Auth/Auth.swift"}},
        ),
    ],
) -> CodeFileRefIn:
    return CodeFileRefIn.model_construct(repository=repository, path=path)


async def _index(state: ServiceState, db: Database, who: Principal, args: CodeFilesIn) -> dict[str, Any]:
    stats = await service.ingest_files(
        db,
        state.embedder,
        who,
        repository=args.repository,
        files=[(f.path, f.content) for f in args.files],
        quota=state.quota,
    )
    return index_body(args.repository, stats)


async def _list(state: ServiceState, db: Database, who: Principal, args: RepositoryIn) -> dict[str, Any]:
    return listing_body(args.repository, await service.list_files(db, who, repository=args.repository))


async def _delete(state: ServiceState, db: Database, who: Principal, args: CodeFileRefIn) -> dict[str, Any]:
    await service.delete_file(db, who, repository=args.repository, path=args.path)
    return {"repository": args.repository, "path": args.path, "deleted": True}


async def _research(state: ServiceState, db: Database, who: Principal, args: ResearchIn) -> dict[str, Any]:
    return await research_service.answer(
        db,
        who,
        query=args.query,
        kind=args.kind,
        symbol=args.symbol,
        depth=args.depth,
        repository=args.repository,
    )


OPERATIONS = (
    Operation(
        "code_index_files",
        "writer",
        CodeFilesIn,
        CodeIndexOut,
        _index,
        Rest(
            "PUT",
            "/files",
            "Index source files of a repository",
            "Parse at symbol boundaries (Swift, Python, TypeScript/JavaScript, Go), embed, store symbols "
            "and edges.",
            responses=_INDEXED,
            response_model=dict[str, Any],
        ),
        Mcp("Index source files of a repository at symbol boundaries.", "code", "replace"),
    ),
    Operation(
        "code_list_files",
        "reader",
        RepositoryIn,
        CodeFileList,
        _list,
        Rest(
            "GET",
            "/files",
            "List indexed files of a repository",
            "Every indexed path with its content hash.",
            params=_repository,
            responses=_LISTING,
            response_model=dict[str, Any],
        ),
        Mcp("Indexed files of a repository.", "code", "read"),
    ),
    Operation(
        "code_delete_file",
        "writer",
        CodeFileRefIn,
        CodeFileDeleted,
        _delete,
        Rest(
            "DELETE",
            "/files",
            "Remove a file from the index",
            "Forget a file's chunks, symbols and edges.",
            status_code=204,
            params=_file,
            responses={404: {"description": "Not indexed in this tenant."}},
        ),
        Mcp("Remove a source file from the index.", "code", "delete"),
    ),
    Operation(
        "code_research",
        "reader",
        ResearchIn,
        ResearchOut,
        _research,
        Rest(
            "POST",
            "/research",
            "Structural questions about indexed code",
            "Implementations (incl. extension conformances), callers/callees with chains, related "
            "components, module dependencies.",
            responses=_RESEARCHED,
            response_model=dict[str, Any],
        ),
        Mcp("Implementations, callers, callees, related components, module dependencies.", "code", "read"),
    ),
)

router = routes(OPERATIONS, prefix="/v1/code", tags=["code"])
