"""`recalld export` and `recalld import`: one tenant's data as a JSONL file (gzip when it ends in .gz)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO

from app.cli.common import CliError, prepare_database
from app.errors import ApiError
from app.infra.config import Settings
from app.infra.db import Database, create_pool
from app.services import tenants as tenant_service
from app.services import transfer

GZIP_MAGIC = b"\x1f\x8b"


@contextlib.contextmanager
def _output(path: str | None) -> Iterator[IO[str]]:
    """stdout, or FILE written beside itself and renamed into place once complete."""
    if path is None or path == "-":
        yield sys.stdout
        sys.stdout.flush()
        return
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    # Closed by the `with opened` below; chosen here because gzip and plain files open differently.
    opened: IO[str] = (
        gzip.open(partial, "wt", encoding="utf-8")  # noqa: SIM115
        if target.suffix == ".gz"
        else partial.open("w", encoding="utf-8")
    )
    try:
        with opened:
            yield opened
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def _input(path: str) -> IO[str]:
    """The export at path ('-': stdin), gzip or plain, recognised by its first bytes."""
    if path == "-":
        return sys.stdin
    try:
        with open(path, "rb") as probe:
            magic = probe.read(2)
        return (
            gzip.open(path, "rt", encoding="utf-8") if magic == GZIP_MAGIC else open(path, encoding="utf-8")
        )
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc}") from exc


async def _lines(source: IO[str]) -> AsyncIterator[str]:
    try:
        for line in source:
            yield line
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read the export: {exc}") from exc


async def _database(settings: Settings) -> Database:
    pool = await create_pool(await prepare_database(settings), settings, size=1)
    return Database(pool, settings.pool_acquire_timeout)


def cmd_export(args: argparse.Namespace, settings: Settings) -> int:
    async def work() -> None:
        db = await _database(settings)
        try:
            async with db.connection() as conn:
                tenant = await tenant_service.tenant_by_name(conn, args.tenant)
            try:
                with _output(args.output) as out:
                    async for line in transfer.export_lines(
                        db, tenant_id=tenant.id, tenant_name=tenant.name, with_embeddings=args.with_embeddings
                    ):
                        out.write(line)
            except OSError as exc:
                raise CliError(f"cannot write {args.output}: {exc}") from exc
        finally:
            await db.pool.close()

    asyncio.run(work())
    if args.output not in (None, "-"):
        print(f"exported tenant {args.tenant!r} to {args.output}", file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace, settings: Settings) -> int:
    from app.embeddings.factory import build_embedder
    from app.startup import prepare_embedding_storage

    source = _input(args.file)

    async def work() -> transfer.ImportResult:
        db = await _database(settings)
        embedder = None
        try:
            async with db.connection() as conn:
                # The model the server embeds with, checked against the one its stored vectors belong to.
                identity = await prepare_embedding_storage(conn, settings, owner=True)
            embedder = await asyncio.to_thread(build_embedder, settings, identity)
            async with db.connection() as conn:
                try:
                    tenant = await tenant_service.tenant_by_name(conn, args.tenant)
                except ApiError:
                    tenant = await tenant_service.create_tenant(conn, args.tenant)
                    print(f"created tenant {tenant.name!r}", file=sys.stderr)
            return await transfer.import_lines(db, embedder, tenant_id=tenant.id, lines=_lines(source))
        finally:
            await db.pool.close()
            if embedder is not None:
                embedder.close()

    with source:
        result = asyncio.run(work())
    rows = ", ".join(f"{count} {table}" for table, count in result.rows.items() if count)
    print(
        f"imported into tenant {args.tenant!r}: {rows or 'nothing'}"
        f"{'; ids renumbered (the tenant already held data)' if result.renumbered_ids else ''}"
        f"{f'; {result.embedded} memories embedded' if result.embedded else ''}",
        file=sys.stderr,
    )
    return 0
