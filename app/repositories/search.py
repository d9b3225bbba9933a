"""SQL of the retrieval legs: semantic, keyword (BM25 over postings / ILIKE). Rank in SQL, fuse in Python.

The WHERE clause is assembled from fixed fragments; every user value travels as a $n parameter.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import asyncpg

from app.embeddings.base import Vector
from app.retrieval.scoring import TIE_BREAK_SQL


@dataclass(frozen=True, slots=True)
class CandidateFilter:
    """Which rows a leg may return; mirrors the search request's filters."""

    tenant_ids: Sequence[str]
    kinds: Sequence[str]
    scope: str | None = None
    min_confidence: float = 0.2
    tags: Sequence[str] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    metadata: dict[str, Any] | None = None
    repository: str | None = None
    path_regex: str | None = None
    exclude_path_regex: str | None = None
    # Semantic leg only: the scripts the embedder reads (None: any); rows in others are left out.
    embedder_scripts: Sequence[str] | None = None


class LegRow(NamedTuple):
    """One ranked hit of one leg, with what fusion and decay need (a tuple: a search makes ~200)."""

    id: uuid.UUID
    score: float
    created_at: datetime
    path: str | None


@dataclass(slots=True)
class _Sql:
    params: list[Any] = field(default_factory=list)

    def bind(self, value: Any) -> str:
        self.params.append(value)
        return f"${len(self.params)}"


def _where(sql: _Sql, f: CandidateFilter) -> str:
    """The shared WHERE clause over alias m (tenant first: it is what RLS also enforces)."""
    clauses = [
        f"m.tenant_id = ANY({sql.bind([uuid.UUID(t) for t in f.tenant_ids])}::uuid[])",
        f"m.kind = ANY({sql.bind(list(f.kinds))}::text[])",
        "(m.kind <> 'episode' OR m.expires_at > now())",
        "(m.validity IS NULL OR m.validity = 'active')",
    ]
    if f.min_confidence > 0:
        # confidence · exp(−rate · days) ≥ min, rearranged: exp() underflows (an error in
        # PostgreSQL) for a fact that has faded long ago, and one such row broke every search.
        clauses.append(
            "(m.confidence IS NULL OR (m.confidence > 0 AND m.decay_rate * "
            "extract(epoch FROM now() - m.last_confirmed_at) / 86400.0 "
            f"<= ln(m.confidence / {sql.bind(f.min_confidence)}::float8)))"
        )
    if f.scope is not None:
        scope = sql.bind(f.scope)
        clauses.append(
            f"((m.kind <> 'episode' AND m.scope IN ('global', {scope})) OR (m.kind = 'episode' AND m.butler = {scope}))"
        )
    if f.tags:
        clauses.append(f"m.tags @> {sql.bind(list(f.tags))}::text[]")
    if f.created_after is not None:
        clauses.append(f"m.created_at >= {sql.bind(f.created_after)}")
    if f.created_before is not None:
        clauses.append(f"m.created_at < {sql.bind(f.created_before)}")
    if f.metadata:
        clauses.append(f"m.metadata @> {sql.bind(f.metadata)}::jsonb")
    if f.repository is not None:
        clauses.append(f"m.repository = {sql.bind(f.repository)}")
    if f.path_regex is not None:
        clauses.append(f"m.path ~ {sql.bind(f.path_regex)}")
    if f.exclude_path_regex is not None:
        clauses.append(f"(m.path IS NULL OR m.path !~ {sql.bind(f.exclude_path_regex)})")
    return " AND ".join(clauses)


def _leg_rows(rows: Sequence[asyncpg.Record]) -> list[LegRow]:
    return [LegRow(r["id"], float(r["score"]), r["created_at"], r["path"]) for r in rows]


def _semantic_extras(sql: _Sql, f: CandidateFilter, q: str, min_similarity: float | None, column: str) -> str:
    """The semantic leg's own conditions: a similarity floor, and rows the embedder can read."""
    extra = ""
    if min_similarity is not None:
        extra += f" AND {column} <=> {q} <= 1 - {sql.bind(min_similarity)}"
    if f.embedder_scripts is not None:
        # A vector of text the model cannot read is noise: those rows are the keyword leg's alone.
        extra += f" AND (m.script IS NULL OR m.script = ANY({sql.bind(list(f.embedder_scripts))}::text[]))"
    return extra


async def begin_index_walks(conn: asyncpg.Connection) -> None:
    """Settings the HNSW statement (search_by_vector) needs, until end_index_walks or the transaction's end.

    The statement names its tenant as a constant, so the plan made once per connection and tenant
    uses the tenant's partial index, and is kept (generic): a plan made per execution cost 0.25 ms
    of planning per search at S2 (docs). Sorting is switched off: the index exists because the
    tenant is past the size where its walk beats sorting its rows, and the planner, pricing a few
    hundred rows' sort below an index scan, would otherwise sort (the tie-break's incremental sort
    is a separate setting). A plan is remade after invalidation (an ANALYZE, an index built or
    dropped), always under these settings.
    """
    await conn.execute("SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_sort = off")


async def end_index_walks(conn: asyncpg.Connection) -> None:
    """Undo begin_index_walks for the statements that follow in the transaction."""
    await conn.execute("RESET plan_cache_mode; RESET enable_sort")


async def search_by_vector(
    conn: asyncpg.Connection,
    *,
    f: CandidateFilter,
    tenant_id: str,
    query_vector: Vector,
    limit: int,
    min_similarity: float | None = None,
) -> list[LegRow]:
    """Nearest rows of one tenant by cosine similarity (1 - distance), through its own HNSW index.

    Run between begin_index_walks and end_index_walks. The index on memory_vector is partial
    (WHERE tenant_id = the tenant: vector_indexes), so the walk visits only this tenant's rows;
    each row found visits its memory row for the filters, and the HNSW iterative scan (set per
    connection) keeps going until `limit` rows pass.
    """
    sql = _Sql()
    q = sql.bind(query_vector)
    # The one value not sent as a parameter: the planner can use the partial index only when it
    # can prove its predicate from the statement itself. It is the canonical text of a UUID, never
    # a client's text (uuid.UUID rejects anything else).
    tenant = f"'{uuid.UUID(tenant_id)}'"
    where = _where(sql, f)
    extras = _semantic_extras(sql, f, q, min_similarity, "v.embedding")
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
        f"SELECT m.id, m.distance, m.created_at, m.path FROM ("
        f"SELECT m.id, v.embedding <=> {q} AS distance, m.created_at, m.path FROM memory_vector v "
        f"CROSS JOIN LATERAL (SELECT m.id, m.created_at, m.path FROM memory m "
        f"WHERE m.tenant_id = v.tenant_id AND m.id = v.memory_id AND {where}{extras} OFFSET 0) m "
        f"WHERE v.tenant_id = {tenant}::uuid "
        f"ORDER BY v.embedding <=> {q} LIMIT {sql.bind(limit)}) m "
        f"ORDER BY m.distance, {TIE_BREAK_SQL}",
        *sql.params,
    )
    return [LegRow(r[0], 1.0 - r[1], r[2], r[3]) for r in rows]


@dataclass(frozen=True, slots=True)
class ExactVectorRows:
    """An exact vector leg's rows, and whether the candidate cut may have hidden rows the filters keep."""

    rows: list[LegRow]
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
    sql = _Sql()
    q = sql.bind(query_vector)
    tenants = sql.bind([uuid.UUID(t) for t in f.tenant_ids])
    floor = "" if min_similarity is None else f" AND v.embedding <=> {q} <= 1 - {sql.bind(min_similarity)}"
    cut = "" if candidates is None else f" LIMIT {sql.bind(candidates)}"
    where = _where(sql, f)
    extras = _semantic_extras(sql, f, q, None, "m.embedding")
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
        SELECT m.id, 1 - n.distance AS score, n.distance, m.created_at, m.path,
               (SELECT count(*) FROM nearest) AS considered, (SELECT max(distance) FROM nearest) AS farthest
        FROM (SELECT * FROM nearest ORDER BY distance) n CROSS JOIN LATERAL (
            SELECT m.id, m.created_at, m.path FROM memory m
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
    return ExactVectorRows(_leg_rows(rows), truncated)


@dataclass(frozen=True, slots=True)
class KeywordRows:
    """A BM25 leg's rows, and whether the per-lexeme cut may have hidden rows the filters keep."""

    rows: list[LegRow]
    truncated: bool


# N, avgdl and the query lexemes' idf, from the statistics the write triggers keep (migration
# 0006): a few indexed rows per lexeme, whatever the tenant's size. $1 query text, $2 tenants.
_BM25_STATS = """
    q AS (SELECT DISTINCT unnest(tsvector_to_array(to_tsvector('english', $1))) AS lexeme),
    corpus AS MATERIALIZED (
        SELECT greatest(sum(documents), 1)::float8 AS n,
               greatest(sum(total_length)::float8 / greatest(sum(documents), 1), 1) AS avgdl
        FROM keyword_corpus_stat WHERE tenant_id = ANY($2::uuid[])
    ), w AS MATERIALIZED (
        SELECT q.lexeme, df.n AS df, ln(1 + (greatest(c.n, df.n) - df.n + 0.5) / (df.n + 0.5)) AS idf
        FROM q CROSS JOIN corpus c CROSS JOIN LATERAL (
            SELECT sum(s.documents)::float8 AS n FROM keyword_lexeme_stat s
            WHERE s.tenant_id = ANY($2::uuid[]) AND s.lexeme = q.lexeme
        ) df
        WHERE df.n > 0
    )"""

# BM25's tf part is tf·(k1+1) / (tf + k1·(1−b) + k1·b/avgdl · dl): $3 = k1·(1−b), $4 = k1·b, and
# the (k1+1) factor ($5) is applied to the final sum. float8 throughout: numeric arithmetic here
# ran once per posting and cost a quarter of the query.
# One candidate's memory row if the filters keep it. A parameterised lookup per candidate whatever
# the statistics say (OFFSET 0 keeps the planner from turning it into a join over the tenant), and
# in the candidates' order, so an exact ranking stops reading once `limit` rows passed.
_MEMORY_OF = (
    "SELECT m.id, m.created_at, m.path, m.search_vector FROM memory m "
    "WHERE m.tenant_id = {source}.tenant_id AND m.id = {source}.memory_id AND {where} OFFSET 0"
)

_TF_PART = "{tf} / ({tf} + $3::float8 + $4::float8 / c.avgdl * {dl})"

# A memory's score is the sum of its lexemes' parts, and float addition is not associative: summed
# in another order (the plan decides: hash or sort grouping, lexemes deduplicated by hash or sort)
# the last bit moved and tied rows swapped places. Each part is rounded to a multiple of 2^-40, so
# every partial sum below 2^13 is exact in float8 and the sum is the same in any order. (A part is
# below its idf <= ln(2N + 1), 14.5 at a million memories: ~560 of the rarest query lexemes.)
_SCORE_GRID = 2**40


def _grid(part: str) -> str:
    """A BM25 part rounded to the grid on which sums do not depend on their order."""
    return f"round(({part}) * {_SCORE_GRID}::float8) / {_SCORE_GRID}::float8"


# Every live posting of lexeme w.lexeme in tenant tenant.id (migration 0013): the blocks without
# the postings of rows deleted or re-indexed since they were compacted, and the delta. A block's
# arrays are unnested in the select list (value per call), not by unnest() in FROM, which fills a
# tuplestore per array and block: 0.5 of 2.6 ms executing a 10,000-memory tenant's statement (docs).
_ALL_POSTINGS = """
    SELECT tenant.id AS tenant_id, u.memory_id, u.tf, u.dl
    FROM (SELECT unnest(k.memory_ids) AS memory_id, unnest(k.term_frequencies) AS tf,
                 unnest(k.document_lengths) AS dl
          FROM keyword_block k WHERE k.tenant_id = tenant.id AND k.lexeme = w.lexeme) u
    WHERE NOT EXISTS (SELECT 1 FROM keyword_stale s WHERE s.tenant_id = tenant.id AND s.memory_id = u.memory_id)
    UNION ALL
    SELECT p.tenant_id, p.memory_id, p.term_frequency, p.document_length FROM keyword_posting p
    WHERE p.tenant_id = tenant.id AND p.lexeme = w.lexeme
"""

# The keyword statement runs on a generic plan once `memory`'s statistics count this many rows: the
# plan then looks each candidate up by its primary key, as it must at any later size.
GENERIC_PLAN_MIN_ROWS = 1000.0

# The candidate cut keeps rows tied with its last one, up to this many times `candidates`, when
# that tie reaches the `limit`-th row: ids are random, so cutting a tie by id would drop the
# newest rows as often as the oldest.
TIED_CANDIDATES_FACTOR = 2


async def search_by_bm25(
    conn: asyncpg.Connection,
    *,
    f: CandidateFilter,
    query_text: str,
    limit: int,
    postings_per_lexeme: int | None,
    candidates: int,
    exact_below_postings: int = 0,
    k1: float = 1.2,
    b: float = 0.75,
) -> KeywordRows:
    """BM25 (k1, b) over the tenants' keyword postings, best first, with the tenants' own statistics.

    postings_per_lexeme=None is exact BM25: every posting of every query lexeme is scored. With a
    number, a query whose lexemes have more than exact_below_postings postings in all reads only
    that many per tenant and lexeme, best impact first (keyword_block's key order, merged with the
    recent postings of keyword_posting), so its cost
    depends on the query, not on the tenant's size; the `candidates` best by their partial sums
    are then re-scored exactly from their stored search_vector, which adds what the cut left out.
    Rare lexemes (the ones that decide BM25) are read whole; a common one carries little idf, so
    the ranking seldom differs from the exact one (`recalld eval --modes keyword` measures
    it). `truncated` says a cut may have hidden rows, so a caller short of `limit` rows after the
    filters can read deeper.
    """
    sql = _Sql()
    for value in (query_text, [uuid.UUID(t) for t in f.tenant_ids], k1 * (1 - b), k1 * b, k1 + 1):
        sql.bind(value)
    where = _where(sql, f)
    if postings_per_lexeme is None:
        statement = f"""
        WITH {_BM25_STATS}, scored AS MATERIALIZED (
            SELECT p.tenant_id, p.memory_id,
                   sum({_grid("w.idf * " + _TF_PART.format(tf="p.tf", dl="p.dl"))}) AS score
            FROM unnest($2::uuid[]) AS tenant(id) CROSS JOIN w CROSS JOIN corpus c
            CROSS JOIN LATERAL ({_ALL_POSTINGS}) p
            GROUP BY p.tenant_id, p.memory_id
        )
        SELECT m.id, s.score * $5::float8 AS score, m.created_at, m.path, false AS truncated
        FROM (SELECT * FROM scored ORDER BY score DESC) s CROSS JOIN LATERAL ({_MEMORY_OF.format(source="s", where=where)}) m
        ORDER BY s.score DESC, {TIE_BREAK_SQL}
        LIMIT {sql.bind(limit)}
        """
    else:
        per_lexeme, exact_below = sql.bind(postings_per_lexeme), sql.bind(exact_below_postings)
        cand, tied_max = sql.bind(candidates), sql.bind(candidates * TIED_CANDIDATES_FACTOR)
        lim = sql.bind(limit)
        tf = "greatest(coalesce(cardinality(u.positions), 1), 1)"
        statement = f"""
        WITH {_BM25_STATS}, depth AS MATERIALIZED (
            -- The statistics say what exact scoring would read: below the bound it is cheap
            -- enough and no posting is skipped (LIMIT NULL); above it, which lists get cut.
            SELECT CASE WHEN coalesce(sum(df), 0) <= {exact_below}::float8 THEN NULL
                        ELSE {per_lexeme}::int END AS per_lexeme,
                   coalesce(sum(df), 0) > {exact_below}::float8 AND coalesce(bool_or(df > {per_lexeme}::int), false)
                       AS lists_cut
            FROM w
        ), top AS MATERIALIZED (
            -- Best first: the first blocks of each lexeme (key order) and the delta's best
            -- (its key backwards), merged. Stale block postings are not filtered here: one takes a
            -- slot, and with any stale posting in the tenants the candidates are re-scored below.
            -- MATERIALIZED: `ranked` then sums each row's parts in the order they were read. Inlined,
            -- the planner may group them by an (unstable) sort instead, and the float sums moved in
            -- their last bit, reordering ties (174 of 1,062 searches differed, docs).
            SELECT p.tenant_id, p.memory_id, {_grid("w.idf * " + _TF_PART.format(tf="p.tf", dl="p.dl"))} AS part
            FROM depth d CROSS JOIN unnest($2::uuid[]) AS tenant(id) CROSS JOIN w CROSS JOIN corpus c
            CROSS JOIN LATERAL (
                SELECT * FROM (
                    (SELECT tenant.id AS tenant_id, u.memory_id, u.tf, u.dl, keyword_impact(u.tf, u.dl) AS impact
                     FROM (SELECT unnest(k.memory_ids) AS memory_id, unnest(k.term_frequencies) AS tf,
                                  unnest(k.document_lengths) AS dl
                           FROM (SELECT k.memory_ids, k.term_frequencies, k.document_lengths FROM keyword_block k
                                 WHERE k.tenant_id = tenant.id AND k.lexeme = w.lexeme ORDER BY k.bucket, k.block
                                 LIMIT d.per_lexeme) k
                           LIMIT d.per_lexeme) u)
                    UNION ALL
                    (SELECT p.tenant_id, p.memory_id, p.term_frequency, p.document_length, p.impact
                     FROM keyword_posting p WHERE p.tenant_id = tenant.id AND p.lexeme = w.lexeme
                     ORDER BY p.impact DESC, p.memory_id DESC LIMIT d.per_lexeme)
                ) x ORDER BY impact DESC, memory_id DESC LIMIT d.per_lexeme
            ) p
            WHERE d.per_lexeme IS NOT NULL
            UNION ALL
            -- Under the bound: every live posting.
            SELECT p.tenant_id, p.memory_id, {_grid("w.idf * " + _TF_PART.format(tf="p.tf", dl="p.dl"))} AS part
            FROM depth d CROSS JOIN unnest($2::uuid[]) AS tenant(id) CROSS JOIN w CROSS JOIN corpus c
            CROSS JOIN LATERAL ({_ALL_POSTINGS}) p
            WHERE d.per_lexeme IS NULL
        ), ranked AS MATERIALIZED (
            SELECT tenant_id, memory_id, sum(part) AS partial FROM top GROUP BY tenant_id, memory_id
            ORDER BY partial DESC, memory_id LIMIT {tied_max}::int + 1
        ), tie AS MATERIALIZED (
            -- The partial sums at the `limit`-th and at the last candidate's place.
            SELECT (SELECT partial FROM ranked ORDER BY partial DESC, memory_id OFFSET {lim}::int - 1 LIMIT 1) AS at_limit,
                   (SELECT partial FROM ranked ORDER BY partial DESC, memory_id OFFSET {cand}::int - 1 LIMIT 1) AS at_cut
        ), cut AS MATERIALIZED (
            -- Every posting read, the partial sums are the scores. When one score spans both
            -- places, all rows holding it stay (up to tied_max) and the tie order (created_at, id)
            -- below picks which rank, as exact BM25 does, not their random ids. Pruned, the
            -- partial sums are not the scores, and the cut stays at `candidates`.
            SELECT * FROM ranked ORDER BY partial DESC, memory_id LIMIT CASE
                WHEN (SELECT per_lexeme FROM depth) IS NULL AND (SELECT at_limit = at_cut FROM tie)
                THEN least((SELECT count(*) FROM ranked WHERE partial >= (SELECT at_cut FROM tie)), {tied_max}::int)
                ELSE {cand}::int END
        ), flags AS MATERIALIZED (
            SELECT d.lists_cut, (SELECT count(*) FROM ranked) > (SELECT count(*) FROM cut) AS candidates_cut,
                   EXISTS (SELECT 1 FROM keyword_stale s WHERE s.tenant_id = ANY($2::uuid[])) AS stale
            FROM depth d
        ), lexemes AS MATERIALIZED (SELECT array_agg(lexeme) AS all_of_them FROM w)
        SELECT * FROM (
            SELECT m.id, m.created_at, m.path,
                   CASE WHEN NOT (flags.lists_cut OR flags.stale) THEN $5::float8 * cut.partial
                   -- Exact score of a row the cut may have shortchanged: its own tsvector narrowed to
                   -- the query lexemes (setweight marks them, ts_filter keeps them).
                   ELSE $5::float8 * (
                       SELECT sum({_grid("w.idf * " + _TF_PART.format(tf=tf, dl="length(m.search_vector)"))})
                       FROM unnest(ts_filter(setweight(m.search_vector, 'A', l.all_of_them), '{{a}}')) AS u
                       JOIN w ON w.lexeme = u.lexeme
                   ) END AS score,
                   flags.lists_cut OR flags.candidates_cut AS truncated
            FROM cut CROSS JOIN LATERAL ({_MEMORY_OF.format(source="cut", where=where)}) m
            CROSS JOIN lexemes l CROSS JOIN corpus c CROSS JOIN flags
            OFFSET 0
        ) m
        -- A row re-indexed since its postings went into blocks may hold none of the words now.
        -- (OFFSET 0 above: scored once, not again for this filter.)
        WHERE m.score IS NOT NULL
        ORDER BY m.score DESC, {TIE_BREAK_SQL}
        LIMIT {sql.bind(limit)}
        """
    # A generic plan, made once per connection and statement: a custom plan cost 1.0 ms of planning
    # per search, a third of the statement (docs), and plan_cache_mode = auto keeps choosing custom
    # ones. But a generic plan stays until the next ANALYZE, and one made while `memory` was nearly
    # empty found each candidate through (tenant_id, kind, created_at, id) instead of the primary
    # key: right after a load every candidate read all of the tenant's rows (133 ms instead of 3 at
    # 10,000, docs). So only once the statistics have seen GENERIC_PLAN_MIN_ROWS rows; before that,
    # custom plans as before. The statements that follow plan as before (RESET: this runs before
    # the semantic leg's own settings, never between them).
    await conn.fetchval(
        "SELECT set_config('plan_cache_mode', CASE WHEN reltuples >= $1 THEN 'force_generic_plan' "
        "ELSE 'auto' END, true) FROM pg_class WHERE oid = 'memory'::regclass",
        GENERIC_PLAN_MIN_ROWS,
    )
    rows = await conn.fetch(statement, *sql.params)
    await conn.execute("RESET plan_cache_mode")
    truncated = postings_per_lexeme is not None and (
        # No row survived the filters: only the statement's flag could say whether the cut hid
        # some, and it went with the rows; assume it did.
        not rows or bool(rows[0]["truncated"])
    )
    return KeywordRows(_leg_rows(rows), truncated)


# The substring tier reads at most this many of the tenants' most recent rows, and of each at most
# this many characters: a query that matches nothing costs a bounded scan, not the whole tenant.
SUBSTRING_SCAN_ROWS = 2000
SUBSTRING_SCAN_CHARS = 4096
# Columns _where() reads, selected from the recent-rows window so the filters apply to it.
_WINDOW_COLUMNS = (
    "id, tenant_id, kind, content, created_at, path, expires_at, validity, confidence, decay_rate, "
    "last_confirmed_at, scope, butler, tags, metadata, repository"
)


async def search_by_substring(
    conn: asyncpg.Connection, *, f: CandidateFilter, patterns: Sequence[str], limit: int
) -> list[LegRow]:
    """ILIKE fallback when the ranked tiers find nothing; score = share of patterns matched.

    No index serves `ILIKE '%word%'`, so the tier looks only at a bounded window: the newest
    SUBSTRING_SCAN_ROWS rows per request (split over its tenants and kinds, each part one range of
    the (tenant_id, kind, created_at) index), and the first SUBSTRING_SCAN_CHARS of each row. The
    request's other filters apply within the window.
    """
    sql = _Sql()
    per_part = max(100, SUBSTRING_SCAN_ROWS // max(1, len(f.tenant_ids) * len(f.kinds)))
    where = _where(sql, f)
    pats = sql.bind(list(patterns))
    head = f"substr(m.content, 1, {sql.bind(SUBSTRING_SCAN_CHARS)})"
    rows = await conn.fetch(
        f"SELECT m.id, m.created_at, m.path, "
        f"  (SELECT count(*) FROM unnest({pats}::text[]) p WHERE {head} ILIKE p)::float8 "
        f"  / cardinality({pats}::text[]) AS score "
        f"FROM unnest({sql.bind([uuid.UUID(t) for t in f.tenant_ids])}::uuid[]) AS t(id) "
        f"CROSS JOIN unnest({sql.bind(list(f.kinds))}::text[]) AS k(kind) "
        f"CROSS JOIN LATERAL (SELECT {_WINDOW_COLUMNS} FROM memory w "
        f"  WHERE w.tenant_id = t.id AND w.kind = k.kind "
        f"  ORDER BY w.created_at DESC, w.id LIMIT {sql.bind(per_part)}) AS m "
        f"WHERE {where} AND {head} ILIKE ANY({pats}::text[]) "
        f"ORDER BY score DESC, {TIE_BREAK_SQL} LIMIT {sql.bind(limit)}",
        *sql.params,
    )
    return _leg_rows(rows)
