"""SQL of the keyword leg: BM25 over the tenants' postings, ranked in SQL (fusion is Python's)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg

from app.repositories.keyword_stats import BM25_STATS, QUERY_IDFS
from app.repositories.search.filters import CandidateFilter, Sql, hits_of, where_clause
from app.retrieval.hits import Hit
from app.retrieval.scoring import TIE_BREAK_SQL


@dataclass(frozen=True, slots=True)
class KeywordRows:
    """A BM25 leg's rows, whether the per-lexeme cut may have hidden rows the filters keep, and the
    idf of every query lexeme, largest first (empty when no row came back)."""

    rows: list[Hit]
    truncated: bool
    query_idfs: list[float]


# BM25's tf part is tf·(k1+1) / (tf + k1·(1−b) + k1·b/avgdl · dl): $3 = k1·(1−b), $4 = k1·b, and
# the (k1+1) factor ($5) is applied to the final sum. float8 throughout: numeric arithmetic here
# ran once per posting and cost a quarter of the query.
# One candidate's memory row if the filters keep it. A parameterised lookup per candidate whatever
# the statistics say (OFFSET 0 keeps the planner from turning it into a join over the tenant), and
# in the candidates' order, so an exact ranking stops reading once `limit` rows passed.
_MEMORY_OF = (
    "SELECT m.id, m.created_at, m.path, m.content_key, m.search_vector FROM memory m "
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
    sql = Sql()
    for value in (query_text, [uuid.UUID(t) for t in f.tenant_ids], k1 * (1 - b), k1 * b, k1 + 1):
        sql.bind(value)
    where = where_clause(sql, f)
    if postings_per_lexeme is None:
        statement = f"""
        WITH {BM25_STATS}, scored AS MATERIALIZED (
            SELECT p.tenant_id, p.memory_id,
                   sum({_grid("w.idf * " + _TF_PART.format(tf="p.tf", dl="p.dl"))}) AS score
            FROM unnest($2::uuid[]) AS tenant(id) CROSS JOIN w CROSS JOIN corpus c
            CROSS JOIN LATERAL ({_ALL_POSTINGS}) p
            GROUP BY p.tenant_id, p.memory_id
        )
        SELECT m.id, s.score * $5::float8 AS score, m.created_at, m.path, m.content_key, false AS truncated,
               {QUERY_IDFS} AS query_idfs
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
        WITH {BM25_STATS}, depth AS MATERIALIZED (
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
            SELECT m.id, m.created_at, m.path, m.content_key,
                   CASE WHEN NOT (flags.lists_cut OR flags.stale) THEN $5::float8 * cut.partial
                   -- Exact score of a row the cut may have shortchanged: its own tsvector narrowed to
                   -- the query lexemes (setweight marks them, ts_filter keeps them).
                   ELSE $5::float8 * (
                       SELECT sum({_grid("w.idf * " + _TF_PART.format(tf=tf, dl="length(m.search_vector)"))})
                       FROM unnest(ts_filter(setweight(m.search_vector, 'A', l.all_of_them), '{{a}}')) AS u
                       JOIN w ON w.lexeme = u.lexeme
                   ) END AS score,
                   flags.lists_cut OR flags.candidates_cut AS truncated, {QUERY_IDFS} AS query_idfs
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
    idfs = [float(idf) for idf in rows[0]["query_idfs"]] if rows else []
    return KeywordRows(hits_of(rows), truncated, idfs)
