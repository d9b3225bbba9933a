"""The tenant's export, streamed to its admin (the same JSONL as `recalld export`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from app.api.deps import Admin, DbDep
from app.services import transfer as service

router = APIRouter(prefix="/v1", tags=["operations"])


@router.get(
    "/export",
    response_class=StreamingResponse,
    operation_id="tenant_export",
    summary="Export every memory, document and code file of the caller's tenant (NDJSON)",
    responses={
        200: {
            "description": "A header line, one line per row, and a last line counting the rows of each table "
            "(a stream without it was cut off). `recalld import` reads it.",
            "content": {
                "application/x-ndjson": {
                    "schema": {"type": "string"},
                    "example": (
                        '{"embedding":null,"format":"recalld-export","schema_revision":"0020_key_lifecycle",'
                        '"tables":["scope_settings","document","code_file","memory","code_symbol","code_edge"],'
                        '"tenant":"default","version":1}\n'
                        '{"row":{"content":"The boat is at pier 7","id":"9b2f…","kind":"fact","reference_count":3,'
                        '"supersedes":null,"validity":"active"},"table":"memory"}\n'
                        '{"end":true,"rows":{"code_edge":0,"code_file":0,"code_symbol":0,"document":0,'
                        '"memory":1,"scope_settings":0}}\n'
                    ),
                }
            },
        },
        403: {"description": "Needs the admin role."},
    },
)
async def export(
    db: DbDep,
    principal: Admin,
    with_embeddings: Annotated[
        bool,
        Query(
            description="Include the stored vectors (else import embeds again).",
            openapi_examples={"example": {"value": False}},
        ),
    ] = False,
) -> StreamingResponse:
    """Read from one snapshot of the tenant; only the caller's own tenant, whatever the key's flags."""
    lines = service.export_lines(
        db, tenant_id=principal.tenant_id, tenant_name=principal.tenant_name, with_embeddings=with_embeddings
    )
    return StreamingResponse(
        lines,
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="{principal.tenant_name}.jsonl"'},
    )
