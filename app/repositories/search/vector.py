"""SQL of the semantic leg: one tenant's HNSW index walk, and the exact scan of the tenants' vectors."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncpg

from app.embeddings.base import Vector
from app.repositories.search.filters import CandidateFilter, Sql, hits_of, semantic_extras, where_clause
from app.retrieval.hits import Hit
from app.retrieval.scoring import TIE_BREAK_SQL


@asynccontextmanager
async def index_walks(conn: asyncpg.Connection, *, walk: bool = True) -> AsyncIterator[None]:
    """Settings the HNSW statement (search_by_vector) needs, for the block (walk=False: none).

    The statement names its tenant as a constant, so the plan made once per connection and tenant
    uses the tenant's partial index, and is kept (generic): a plan made per execution cost 0.25 ms
    of planning per search at S2 (docs). Sorting is switched off: the index exists because the
    tenant is past the size where its walk beats sorting its rows, and the planner, pricing a few
    hundred rows' sort below an index scan, would otherwise sort (the tie-break's incremental sort
    is a separate setting). A plan is remade after invalidation (an ANALYZE, an index built or
    dropped), always under these settings. The statements after the block plan as usual.
    """
    if not walk:
        yield
        return
    await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_sort = off")
    yield
    # Not in a `finally`: after an error the transaction is aborted (a RESET would fail and hide
    # the error) and SET LOCAL ends with it anyway.
    await conn.execute("RESET plan_cache_mode; RESET enable_sort")


async def search_by_vector(
    conn: asyncpg.Connection,
    *,
    f: CandidateFilter,
    tenant_id: str,
    query_vector: Vector,
    limit: int,
    min_similarity: float | None = None,
) -> list[Hit]:
    """Nearest rows of one tenant by cosine similarity (1 - distance), through its own HNSW index.

    Run inside index_walks. The index on memory_vector is partial
    (WHERE tenant_id = the tenant: vector_indexes), so the walk visits only this tenant's rows;
    each row found visits its memory row for the filters, and the HNSW iterative scan (set per
    connection) keeps going until `limit` rows pass.
    """
    sql = Sql()
    q = sql.bind(query_vector)
    # The one value not sent as a parameter: the planner can use the partial index only when it
    # can prove its predicate from the statement itself. It is the canonical text of a UUID, never
    # a client's text (uuid.UUID rejects anything else).
    tenant = f"'{uuid.UUID(tenant_id)}'"
    where = where_clause(sql, f)
    extras = semantic_extras(sql, f, q, min_similarity, "v.embedding")
    # The distance is selected as the ORDER BY expression itself, so PostgreSQL computes it once
    # per row; the score 1 - distance is the same float8 subtraction done here.
    # Each row the walk yields looks up its own memory row (OFFSET 0 keeps the lookup a
    # parameterised one: joined, the planner under-counted the tenant's rows that pass the filters
    # and read all of them once to compare each walked row with, 81 ms instead of 4).
    # The walk stops at the `limit`-th row that passes (inner LIMIT, walk order); only those rows
    # are then ordered with the tie-break. Ordered by distance and tie-break in one go, the sort
    # read one row more to see whether it ties with the last, and with ef_search = limit that
    # row starts a second HNSW search: 0.8 of 2.5 ms of CPU at 50,000 rows (docs). So a row at
    # exactly the last row's distance (a duplicate vector) but walked after it is left out.
    rows = await conn.fetch(
        f"SELECT m.id, m.distance, m.created_at, m.path, m.content_key FROM ("
        f"SELECT m.id, v.embedding <=> {q} AS distance, m.created_at, m.path, m.content_key FROM memory_vector v "
        f"CROSS JOIN LATERAL (SELECT m.id, m.created_at, m.path, m.content_key FROM memory m "
        f"WHERE m.tenant_id = v.tenant_id AND m.id = v.memory_id AND {where}{extras} OFFSET 0) m "
        f"WHERE v.tenant_id = {tenant}::uuid "
        f"ORDER BY v.embedding <=> {q} LIMIT {sql.bind(limit)}) m "
        f"ORDER BY m.distance, {TIE_BREAK_SQL}",
        *sql.params,
    )
    return [Hit(r[0], 1.0 - r[1], r[2], r[3], r[4]) for r in rows]


@dataclass(frozen=True, slots=True)
class ExactVectorRows:
    """An exact vector leg's rows, and whether the candidate cut may have hidden rows the filters keep."""

    rows: list[Hit]
    truncated: bool


async def search_by_exact_vector(
    conn: asyncpg.Connection,
    *,
    f: CandidateFilter,
    query_vector: Vector,
    limit: int,
    candidates: int | None,
    min_similarity: float | None = None,
) -> ExactVectorRows:
    """Exact nearest rows by cosine similarity: every vector of the tenants, from memory_vector.

    The narrow rows are ranked by distance alone; only the nearest `candidates` (None: all) then
    visit their memory row for the filters, in distance order, until `limit` pass. So the cost is
    one distance per tenant row plus a lookup per candidate, whatever else the table holds.
    `truncated` says the cut may have hidden a row that belongs in the answer: too few passed, or
    the last one ties with the farthest candidate (a tied row beyond the cut may sort before it).
    """
    sql = Sql()
    q = sql.bind(query_vector)
    tenants = sql.bind([uuid.UUID(t) for t in f.tenant_ids])
    floor = "" if min_similarity is None else f" AND v.embedding <=> {q} <= 1 - {sql.bind(min_similarity)}"
    cut = "" if candidates is None else f" LIMIT {sql.bind(candidates)}"
    where = where_clause(sql, f)
    extras = semantic_extras(sql, f, q, None, "m.embedding")
    # A tenant's rows are read in the heap's order (a bitmap scan), not the primary key's: random
    # memory ids send an index scan to a page per row, twice the time for 10,000 rows (docs). With
    # sequential scans off too that is the only plan there is, so it is made once per connection
    # and statement (generic) instead of per search: planning was 0.3-0.4 ms of a 0.6-1.2 ms
    # statement for tenants of 100-2,000 rows (docs), and no statistics can turn it into a scan of
    # every tenant's vectors.
    await conn.execute(
        "SET LOCAL enable_indexscan = off; SET LOCAL enable_seqscan = off; "
        "SET LOCAL plan_cache_mode = force_generic_plan"
    )
    rows = await conn.fetch(
        f"""
        WITH nearest AS MATERIALIZED (
            SELECT v.tenant_id, v.memory_id, v.embedding <=> {q} AS distance FROM memory_vector v
            WHERE v.tenant_id = ANY({tenants}::uuid[]){floor}
            ORDER BY distance{cut}
        )
        SELECT m.id, 1 - n.distance AS score, n.distance, m.created_at, m.path, m.content_key,
               (SELECT count(*) FROM nearest) AS considered, (SELECT max(distance) FROM nearest) AS farthest
        FROM (SELECT * FROM nearest ORDER BY distance) n CROSS JOIN LATERAL (
            SELECT m.id, m.created_at, m.path, m.content_key FROM memory m
            WHERE m.tenant_id = n.tenant_id AND m.id = n.memory_id AND {where}{extras} OFFSET 0
        ) m
        ORDER BY n.distance, {TIE_BREAK_SQL} LIMIT {sql.bind(limit)}
        """,
        *sql.params,
    )
    await conn.execute("RESET enable_indexscan; RESET enable_seqscan; RESET plan_cache_mode")
    truncated = candidates is not None and (
        # With no row left, the counts went with the rows: assume the cut hid some.
        not rows
        or (
            rows[0]["considered"] >= candidates
            and (len(rows) < limit or rows[-1]["distance"] >= rows[0]["farthest"])
        )
    )
    return ExactVectorRows(hits_of(rows), truncated)
