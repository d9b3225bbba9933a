"""Code index: upload source files, list/delete them, and code_research."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response
from pydantic import ConfigDict, Field, model_validator

from app.api.deps import ConnDep, Reader, StateDep, Writer
from app.api.schemas import StrictModel
from app.services import code as service

router = APIRouter(prefix="/v1/code", tags=["code"])

RepositoryName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@/:-]*$",
        description="Repository name; files, symbols and code search are grouped by it.",
    ),
]
RepositoryQuery = Annotated[
    str,
    Query(
        max_length=200,
        description="Repository name as indexed.",
        openapi_examples={"example": {"value": "ios-app"}},
    ),
]


class CodeFileIn(StrictModel):
    """One source file."""

    path: str = Field(
        ..., description="Path relative to the repository root, e.g. Sources/Auth/AuthService.swift."
    )
    content: str = Field(..., max_length=service.MAX_CODE_FILE_BYTES, description="File text (≤ 1 MiB).")


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
    depth: int = Field(2, ge=1, le=5, description="How far callers/callees are traced.")
    repository: str | None = Field(None, max_length=200, description="Only this repository.")

    @model_validator(mode="after")
    def _question_given(self) -> ResearchIn:
        if self.query is None and (self.kind is None or self.symbol is None):
            raise ValueError("send either `query` in words, or both `kind` and `symbol`")
        return self


def index_body(repository: str, stats: service.IngestStats) -> dict[str, Any]:
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
async def put_files(body: CodeFilesIn, state: StateDep, conn: ConnDep, principal: Writer) -> dict[str, Any]:
    """Parse at symbol boundaries (Swift, Python, TypeScript/JavaScript, Go), embed, store symbols and edges."""
    stats = await service.ingest_files(
        conn,
        state.embedder,
        principal,
        repository=body.repository,
        files=[(f.path, f.content) for f in body.files],
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
async def list_files(conn: ConnDep, principal: Reader, repository: RepositoryQuery) -> dict[str, Any]:
    """Every indexed path with its content hash."""
    files = await service.list_files(conn, principal, repository=repository)
    return listing_body(repository, files)


@router.delete(
    "/files",
    status_code=204,
    operation_id="code_delete_file",
    summary="Remove a file from the index",
    responses={404: {"description": "Not indexed in this tenant."}},
)
async def delete_file(
    conn: ConnDep,
    principal: Writer,
    repository: RepositoryQuery,
    path: Annotated[
        str,
        Query(
            max_length=512,
            description="Path as indexed.",
            openapi_examples={"example": {"value": "Sources/Auth/Auth.swift"}},
        ),
    ],
) -> Response:
    """Forget a file's chunks, symbols and edges."""
    await service.delete_file(conn, principal, repository=repository, path=path)
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
async def code_research(body: ResearchIn, conn: ConnDep, principal: Reader) -> dict[str, Any]:
    """Implementations (incl. extension conformances), callers/callees with chains, related components, module dependencies."""
    return await service.answer(
        conn,
        principal,
        query=body.query,
        kind=body.kind,
        symbol=body.symbol,
        depth=body.depth,
        repository=body.repository,
    )
