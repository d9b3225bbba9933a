"""SQL of the planner-statistics refresh: which of recalld's tables have outgrown their statistics, ANALYZE.

After a bulk load or delete the planner keeps the old row counts and tenant frequencies until
autovacuum's next visit (its naptime, a minute by default), and the plans made meanwhile are the
ones for the old table (docs/benchmarks.md, "Keyword right after a load"). ANALYZE is the owner's
(or a superuser's) to run, so this runs on the owner's login.
"""

from __future__ import annotations

import asyncpg

# Shorter than any sane deadlock_timeout (1 s by default): our ANALYZE gives way to a VACUUM or a
# concurrent index build holding the table, instead of waiting long enough to cancel autovacuum.
ANALYZE_LOCK_TIMEOUT = "200ms"


async def tables_with_stale_row_counts(conn: asyncpg.Connection) -> list[str]:
    """The role's own tables whose live rows differ from the planner's count by more than autovacuum allows.

    Only the role's tables in the current schema: ANALYZE skips others (with a warning each time),
    and tables another application keeps in the same schema are not recalld's to maintain. The
    tolerance is autovacuum's own analyze threshold (autovacuum_analyze_threshold +
    autovacuum_analyze_scale_factor × the counted rows), applied to the change in live rows only:
    inserts and deletes move the estimates plans depend on, while updates (each search's reference
    bump) do not, and autovacuum still handles those. Nothing when autovacuum is off: the operator
    has taken statistics into their own hands.
    """
    rows = await conn.fetch(
        """
        SELECT s.relname FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
        WHERE s.schemaname = current_schema() AND pg_get_userbyid(c.relowner) = current_user
          AND current_setting('autovacuum')::bool
          AND abs(s.n_live_tup - greatest(c.reltuples, 0)) >
              current_setting('autovacuum_analyze_threshold')::float8
              + current_setting('autovacuum_analyze_scale_factor')::float8 * greatest(c.reltuples, 0)
        ORDER BY s.relname
        """
    )
    return [str(r["relname"]) for r in rows]


async def analyze_table(conn: asyncpg.Connection, *, table: str) -> bool:
    """ANALYZE one table (a name tables_with_stale_row_counts gave); False if its lock was not free."""
    statement: str = await conn.fetchval("SELECT format('ANALYZE %I', $1::text)", table)
    try:
        async with conn.transaction():
            await conn.execute(f"SET LOCAL lock_timeout = '{ANALYZE_LOCK_TIMEOUT}'")
            await conn.execute(statement)
    except asyncpg.LockNotAvailableError:
        return False
    return True
