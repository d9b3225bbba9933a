"""Export and import of one tenant: a streaming JSONL of every row that is not derived from others.

Line 1 is a header (format, version, the schema revision, the embedding model); then one line per
row, {"table": ..., "row": {...}}, with every stored column but tenant_id, so columns that later
migrations add travel unchanged; the last line counts the rows of each table, so a cut-off file is
refused instead of imported in part. Keyword postings and statistics, vectors' side table and
usage counters are rebuilt by the triggers as rows arrive; keys stay with their server.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import asyncpg

from app.embeddings.base import Embedder
from app.errors import ApiError
from app.infra.db import Database
from app.repositories import transfer as repo
from app.repositories.embedding_storage import recorded_model
from app.services.embedding_texts import embedding_texts

FORMAT = "recalld-export"
VERSION = 1
# The tenant's own data, in an order in which import can insert rows as they come.
TABLES = ("scope_settings", "document", "code_file", "memory", "code_symbol", "code_edge")
BATCH_ROWS = 500
EMBED_BATCH = 256
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _line(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")) + "\n"


def _is_vector(column: repo.Column) -> bool:
    # The embedding columns are vector(n), or halfvec(n) for models past 2,000 dimensions.
    return column.type in ("vector", "halfvec")


async def export_lines(
    db: Database, *, tenant_id: str, tenant_name: str, with_embeddings: bool
) -> AsyncIterator[str]:
    """The tenant's export, line by line, read from one snapshot."""
    async with db.transaction([tenant_id], readonly=True, snapshot=True) as conn:
        identity = await recorded_model(conn)
        yield _line(
            {
                "format": FORMAT,
                "version": VERSION,
                "schema_revision": await repo.schema_revision(conn),
                "tenant": tenant_name,
                "exported_at": datetime.now(UTC).isoformat(),
                "embedding": identity if with_embeddings else None,
                "tables": list(TABLES),
            }
        )
        counts: dict[str, int] = {}
        for table in TABLES:
            columns = await repo.table_columns(conn, table=table)
            vectors = [] if with_embeddings else [c.name for c in columns.stored if _is_vector(c)]
            # Computed columns (generated, identity) are rebuilt on import; identity columns number
            # rows in write order, so rows are exported in that order to be numbered alike.
            order = columns.identity + await repo.key_columns(conn, table=table)
            counts[table] = 0
            async for row in repo.stream_rows(
                conn,
                table=table,
                tenant_id=tenant_id,
                leave_out=["tenant_id", *columns.computed, *vectors],
                order=order,
            ):
                counts[table] += 1
                yield _line({"table": table, "row": row})
        yield _line({"end": True, "rows": counts})


@dataclass(slots=True)
class ImportResult:
    """What an import stored: rows per table, whether ids were renumbered, memories embedded."""

    rows: dict[str, int] = field(default_factory=dict)
    renumbered_ids: bool = False
    embedded: int = 0


def _invalid(message: str, details: dict[str, Any] | None = None) -> ApiError:
    return ApiError(422, "validation_error", message, details)


def _header(line: str | None) -> dict[str, Any]:
    try:
        header = json.loads(line) if line is not None else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise _invalid("not a recalld export: the first line must be its header")
    if header.get("version") != VERSION:
        raise _invalid(
            f"export format version {header.get('version')!r} is not supported (this recalld reads {VERSION})"
        )
    return header


def _renumber(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, list):
        return [_renumber(v, ids) for v in value]
    if isinstance(value, str) and _UUID.fullmatch(value):
        return ids.setdefault(value.lower(), str(uuid.uuid4()))
    return value


class _Importer:
    """Rows of one import, batched per table and column set, inside the caller's transaction."""

    def __init__(
        self,
        conn: asyncpg.Connection,
        *,
        tenant_id: str,
        columns: dict[str, repo.Columns],
        header: dict[str, Any],
    ) -> None:
        self.conn = conn
        self.tenant_id = tenant_id
        self.columns = columns
        self.header = header
        self.batch: list[dict[str, Any]] = []
        self.batch_key: tuple[str, tuple[str, ...]] | None = None
        self.counts: dict[str, int] = {}

    def check(self, table: Any, row: Any) -> tuple[str, dict[str, Any]]:
        if table not in self.columns or not isinstance(row, dict):
            raise _invalid(f"line for unknown table {table!r}: an export holds rows of {', '.join(TABLES)}")
        known = self.columns[table]
        unknown = sorted(set(row) - {c.name for c in known.stored} - set(known.computed))
        if unknown:
            raise _invalid(
                f"the export has columns this server does not know ({table}: {', '.join(unknown)}): it was made "
                f"at schema revision {self.header.get('schema_revision')}; upgrade this server first",
                {"table": table, "columns": unknown},
            )
        return table, {k: v for k, v in row.items() if k not in known.computed}

    async def add(self, table: str, row: dict[str, Any]) -> None:
        key = (table, tuple(sorted(row)))
        if key != self.batch_key or len(self.batch) >= BATCH_ROWS:
            await self.flush()
            self.batch_key = key
        self.batch.append(row)
        self.counts[table] = self.counts.get(table, 0) + 1

    async def flush(self) -> None:
        if self.batch and self.batch_key is not None:
            table, names = self.batch_key
            await repo.insert_rows(
                self.conn, table=table, tenant_id=self.tenant_id, columns=names, rows=self.batch
            )
        self.batch = []


async def import_lines(
    db: Database, embedder: Embedder | None, *, tenant_id: str, lines: AsyncIterator[str]
) -> ImportResult:
    """Store an export in the tenant, all or nothing.

    Ids are kept when the tenant holds nothing yet, else every id is replaced by a new one, the
    same new one wherever it appears (links included). Embeddings in the export are kept when they
    come from this server's model; otherwise, or when absent, memories are embedded again.
    """
    header = _header(await anext(lines, None))
    exported_model = header.get("embedding")
    ours = embedder.identity if embedder is not None else None
    keep_vectors = ours is not None and exported_model == {
        "provider": ours.provider,
        "model": ours.model,
        "dim": ours.dim,
    }
    try:
        return await _import(
            db, embedder, tenant_id=tenant_id, lines=lines, header=header, keep_vectors=keep_vectors
        )
    except asyncpg.UniqueViolationError as exc:
        # Ids are renumbered, so what clashes is a natural key: a document path, a code file, a scope.
        raise ApiError(
            409,
            "conflict",
            f"the tenant already holds a row the export has ({exc.table_name}: {exc.detail}); nothing was imported",
        ) from exc


async def _import(
    db: Database,
    embedder: Embedder | None,
    *,
    tenant_id: str,
    lines: AsyncIterator[str],
    header: dict[str, Any],
    keep_vectors: bool,
) -> ImportResult:
    result = ImportResult()
    async with db.transaction([tenant_id]) as conn:
        columns = {table: await repo.table_columns(conn, table=table) for table in TABLES}
        uuid_columns = {
            t: {c.name for c in cols.stored if c.type in ("uuid", "uuid[]")} for t, cols in columns.items()
        }
        vector_columns = {t: {c.name for c in cols.stored if _is_vector(c)} for t, cols in columns.items()}
        holds = [t for t in TABLES if await repo.count_rows(conn, table=t, tenant_id=tenant_id) > 0]
        new_ids: dict[str, str] | None = {} if holds else None
        importer = _Importer(conn, tenant_id=tenant_id, columns=columns, header=header)
        to_embed: list[uuid.UUID] = []
        trailer: dict[str, Any] | None = None
        async for text in lines:
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except ValueError as exc:
                raise _invalid(f"line {sum(importer.counts.values()) + 2} is not JSON") from exc
            if not isinstance(record, dict):
                raise _invalid("every line of an export is a JSON object")
            if record.get("end") is True:
                trailer = record
                break
            table, row = importer.check(record.get("table"), record.get("row"))
            if new_ids is not None:
                row = {k: _renumber(v, new_ids) if k in uuid_columns[table] else v for k, v in row.items()}
            if vector_columns[table]:
                if not keep_vectors:
                    row = {k: v for k, v in row.items() if k not in vector_columns[table]}
                if (
                    table == "memory"
                    and embedder is not None
                    and not all(row.get(c) for c in vector_columns[table])
                ):
                    to_embed.append(uuid.UUID(row["id"]))
            await importer.add(table, row)
        await importer.flush()
        if trailer is None or trailer.get("rows") != {t: importer.counts.get(t, 0) for t in TABLES}:
            raise _invalid(
                "the export is incomplete (its last line, the row counts, is missing or does not match): nothing was imported"
            )
        if embedder is not None and to_embed:
            result.embedded = await _embed(conn, embedder, tenant_id=tenant_id, ids=to_embed)
    result.rows = importer.counts
    result.renumbered_ids = new_ids is not None
    return result


async def _embed(
    conn: asyncpg.Connection, embedder: Embedder, *, tenant_id: str, ids: list[uuid.UUID]
) -> int:
    """Embed imported memories as their write would have: code with its header, the rest as they are."""
    done = 0
    for start in range(0, len(ids), EMBED_BATCH):
        sources = await repo.embedding_sources(
            conn, tenant_id=tenant_id, ids=ids[start : start + EMBED_BATCH]
        )
        texts = embedding_texts(sources)
        vectors = await embedder.embed_documents(texts)
        await repo.set_embeddings(
            conn, tenant_id=tenant_id, vectors=[(s.id, v) for s, v in zip(sources, vectors, strict=True)]
        )
        done += len(sources)
    return done
