"""recalld-client streams the tenant export into a file or an iterator (sync and async); `recalld import` restores it."""

from __future__ import annotations

import gzip
import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi import FastAPI

from app.infra.config import Settings
from recalld_client import APIConnectionError, AsyncClient, Client, PermissionDeniedError
from tests.integration.test_admin_cli import _recalld
from tests.integration.test_client import serving
from tests.integration.test_export_import import _rows
from tests.support import TenantFactory
from tests.tenant_content import fill


def _timeless(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The export without its header's exported_at: two exports of unchanged data compare equal."""
    return [{k: v for k, v in line.items() if k != "exported_at"} for line in lines]


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.fixture(scope="module")
def server(settings: Settings, app: FastAPI) -> Iterator[str]:
    """A real uvicorn server: the export streams over a socket, as it does for a user."""
    with serving(settings, rate_limit_per_second=0) as url:
        yield url


async def test_an_export_streamed_to_a_file_imports_into_the_same_rows(
    client: httpx.AsyncClient,
    make_tenant: TenantFactory,
    admin_conn: asyncpg.Connection,
    data_dir: Path,
    tmp_path: Path,
    server: str,
) -> None:
    source = await make_tenant("cexp")
    await fill(client, source)
    export = tmp_path / "source.jsonl.gz"
    with Client(server, source.admin) as recalld:
        counts = recalld.tenant_export_to(export)
        listed = recalld.tenant_export()
    lines = [json.loads(line) for line in gzip.decompress(export.read_bytes()).decode().splitlines()]
    assert _timeless(lines) == _timeless(listed)
    assert lines[0]["format"] == "recalld-export" and lines[-1] == {"end": True, "rows": counts}
    assert counts["memory"] == sum(1 for line in lines if line.get("table") == "memory") > 0
    assert _files(tmp_path) == ["source.jsonl.gz"]

    target = f"cexp-dst-{uuid.uuid4().hex[:10]}"
    code, output = await _recalld(data_dir, "import", "--tenant", target, str(export))
    assert code == 0, output
    target_id = await admin_conn.fetchval("SELECT id::text FROM tenant WHERE name = $1", target)
    assert await _rows(admin_conn, target_id, leave_out=("embedding",)) == await _rows(
        admin_conn, source.id, leave_out=("embedding",)
    )

    # The async client streams the same lines, to an iterator and into an open binary file.
    async with AsyncClient(server, source.admin) as arecalld:
        assert _timeless([line async for line in arecalld.iter_tenant_export()]) == _timeless(lines)
        into = io.BytesIO()
        assert await arecalld.tenant_export_to(into) == counts
        assert _timeless(await arecalld.tenant_export()) == _timeless(lines)
    assert _timeless([json.loads(line) for line in into.getvalue().decode().splitlines()]) == _timeless(lines)


async def test_a_refused_or_cut_off_export_leaves_no_file(
    make_tenant: TenantFactory, tmp_path: Path, server: str
) -> None:
    tenant = await make_tenant("cexp-cut")
    export = tmp_path / "mine.jsonl"
    with Client(server, tenant.reader) as reader, pytest.raises(PermissionDeniedError):
        reader.tenant_export_to(export)
    assert _files(tmp_path) == []

    with Client(server, tenant.admin) as admin:
        whole = b"".join(json.dumps(line).encode() + b"\n" for line in admin.tenant_export())
    # Cut after a whole line and inside the last one, as a dropped connection leaves a stream.
    for cut in (whole[: whole.rstrip(b"\n").rfind(b"\n") + 1], whole[:-5]):
        transport = httpx.MockTransport(lambda request, cut=cut: httpx.Response(200, content=cut))
        with Client(
            "http://recalld.test", tenant.admin, http_client=httpx.Client(transport=transport)
        ) as broken:
            with pytest.raises(APIConnectionError, match="cut off"):
                broken.tenant_export_to(export)
            with pytest.raises(APIConnectionError, match="cut off"):
                list(broken.iter_tenant_export())
        assert _files(tmp_path) == []
        async with AsyncClient(
            "http://recalld.test", tenant.admin, http_client=httpx.AsyncClient(transport=transport)
        ) as abroken:
            with pytest.raises(APIConnectionError, match="cut off"):
                await abroken.tenant_export_to(export)
            with pytest.raises(APIConnectionError, match="cut off"):
                [line async for line in abroken.iter_tenant_export()]
        assert _files(tmp_path) == []
