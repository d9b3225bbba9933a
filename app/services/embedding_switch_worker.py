"""The embedding switch's worker, in the serving process's lifespan when it has the schema owner's login.

It embeds every stored memory with the new model in the background while the service answers
from the old vectors, and lends the new model to writes (Embedder.lend_switch_target) so that what they
store is embedded with both. When every memory has its new vector, one transaction puts them in
place and records the new model, with the model gate (app.model_gate) closed so no request mixes
the two. The switch's record and counts are services.embedding_switch's.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from app.embeddings.base import EmbedderIdentity, Vector
from app.embeddings.factory import build_embedder, serve_hint
from app.infra.db import connect
from app.repositories import embedding_switch as repo
from app.repositories.vector_indexes import see_every_tenant
from app.services.embedding_switch import (
    DRAIN_SECONDS,
    LOCK_SECONDS,
    POLL_SECONDS,
    label,
    progress_view,
    target_settings,
)
from app.services.embedding_switch_run import MAX_BACKOFF_SECONDS, SwitchRun
from app.services.embedding_texts import embedding_texts
from app.state import ServiceState

log = logging.getLogger("recalld.embedding_switch")

# How often a running worker reports its progress (rate, state) and that it runs (heartbeat).
REPORT_SECONDS = 2.0


class _NewModelFailed(Exception):
    """The new model failed inside the cut-over: its transaction rolls back, the worker backs off."""


class SwitchWorker:
    """Runs the recorded switch in the serving process: re-embeds, reports, cuts over, or aborts."""

    def __init__(self, owner_dsn: str, state: ServiceState) -> None:
        self._dsn = owner_dsn
        self._state = state
        self._run: SwitchRun | None = None
        # What the heartbeat task records once after an unexpected failure (_fail), instead of a heartbeat.
        self._failure: dict[str, Any] | None = None

    async def run_forever(self) -> None:
        """The lifespan task: reconnects after failures, until cancelled."""
        beat = asyncio.create_task(self._beat())
        try:
            while True:
                try:
                    conn = await connect(self._dsn)
                    try:
                        while True:
                            if not await self.step(conn):
                                await asyncio.sleep(POLL_SECONDS)
                    finally:
                        await conn.close()
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                    log.warning("embedding switch worker: %s; retrying in %.0f s", exc, POLL_SECONDS)
                    await asyncio.sleep(POLL_SECONDS)
                except Exception as exc:
                    # Whatever it was, the switch's state is in the database: the next try resumes it.
                    log.exception("embedding switch worker failed; retrying in %.0f s", MAX_BACKOFF_SECONDS)
                    self._fail(exc)
                    await asyncio.sleep(MAX_BACKOFF_SECONDS)
        finally:
            beat.cancel()
            self._detach()

    def _fail(self, exc: Exception) -> None:
        """Until the retry after an unexpected failure: lend the new model to no write (the retry embeds them), beat no more.

        Beating on through the pause, `recalld embeddings status` showed a running worker with its
        last rate, and an abort waited on the sleeping worker instead of doing it itself.
        """
        self._detach()
        retry = datetime.now(UTC) + timedelta(seconds=MAX_BACKOFF_SECONDS)
        state = f"failed ({type(exc).__name__}: {exc}); tries again at {retry:%H:%M:%S} UTC"
        self._failure = {"heartbeat": None, "progress": {"state": state, "rate": 0.0}}
        self._state.embedding_switch = {"state": state}

    async def _beat(self) -> None:
        """Record that this worker runs the switch, every REPORT_SECONDS while one is attached (or that it failed).

        Off the batches' path, on a connection of its own: a batch, a cut-over's drain or a pause
        for the provider can each take longer than WORKER_STALE_SECONDS under load, and a heartbeat
        written between batches then told `recalld embeddings status` the worker was not running.
        A failure (_fail) is recorded here too, after any heartbeat in flight, so none lands after it.
        """
        conn: asyncpg.Connection | None = None
        try:
            while True:
                fields: dict[str, Any] | None = None
                if self._run is not None:
                    fields = {"heartbeat": time.time()}
                elif self._failure is not None:
                    fields, self._failure = self._failure, None
                if fields is None:
                    if conn is not None:
                        conn.terminate()
                        conn = None
                else:
                    try:
                        conn = conn or await connect(self._dsn)
                        await repo.merge_switch_record(conn, fields)
                    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                        log.warning("embedding switch heartbeat: %s; retrying", exc)
                        if conn is not None:
                            conn.terminate()
                            conn = None
                await asyncio.sleep(REPORT_SECONDS)
        finally:
            if conn is not None:
                conn.terminate()

    async def step(self, conn: asyncpg.Connection) -> bool:
        """One unit of work; False when there was none (nothing recorded, or waiting)."""
        record = await repo.switch_record(conn)
        if record is None or (self._run is not None and self._run.record["id"] != record["id"]):
            self._detach()
            if record is None:
                return False
        assert record is not None
        if record.get("state") == "aborting":
            await self._abort(conn)
            return True
        run = self._run or await self._attach(conn, record)
        if run is None:
            return False
        if run.backoff and time.monotonic() < run.next_request_at:
            await self._report(conn, run)
            return False
        worked = await self._batch(conn, run)
        if self._run is run:  # not after the cut-over
            await self._report(conn, run)
        return worked

    async def _attach(self, conn: asyncpg.Connection, record: dict[str, Any]) -> SwitchRun | None:
        embedder = self._state.embedder
        if embedder is None:
            return None
        # A heartbeat before writes use the new model: an abort that sees none drops its column itself.
        await repo.merge_switch_record(conn, {"heartbeat": time.time()})
        target = record["target"]
        identity = EmbedderIdentity(target["provider"], target["model"], int(target["dim"]))
        try:
            built = await asyncio.to_thread(
                build_embedder, target_settings(self._state.settings, record), identity
            )
        except Exception as exc:
            log.warning("embedding switch: cannot load %s (%s); retrying", label(target), exc)
            progress = {"state": f"cannot load the new model: {exc}", "rate": 0.0}
            await repo.merge_switch_record(conn, {"progress": progress})
            self._state.embedding_switch = {"state": progress["state"]}
            return None
        assert built is not None
        # From here on, writes embed with both models.
        embedder.lend_switch_target(record["id"], built)
        self._run = SwitchRun(record=record, target=built)
        log.info("embedding switch to %s: running", label(target))
        return self._run

    def _detach(self) -> None:
        run, self._run = self._run, None
        self._state.embedding_switch = None
        if run is None:
            return
        if self._state.embedder is not None:
            self._state.embedder.withdraw_switch_target(run.target)
        run.target.close()

    async def _batch(self, conn: asyncpg.Connection, run: SwitchRun) -> bool:
        settings = self._state.settings
        async with conn.transaction():
            await see_every_tenant(conn)
            rows = await repo.pending_rows(conn, after=run.after, limit=settings.embedding_switch_batch_size)
            if not rows and run.after is not None:
                # A pass ended: one more from the start finds the rows it skipped (changed meanwhile).
                run.after = None
                return True
        if not rows:
            # A cut-over that had to give way (requests or locks still held) waits a poll interval,
            # so the gate is not closed again at once.
            return await self._cut_over(conn, run)
        tenant = str(rows[0].tenant_id)
        try:
            vectors = await self._embed(run, embedding_texts(rows))
        except Exception as exc:  # the provider is down or answers wrongly: wait, then the same batch again
            run.back_off(exc)
            return False
        run.backoff, run.state = 0.0, "running"
        async with conn.transaction():
            await conn.execute("SELECT set_config('recalld.tenant_ids', $1, true)", tenant)
            pairs = list(zip(rows, vectors, strict=True))
            stored = await repo.store_pending(
                conn, switch_id=run.record["id"], tenant_id=rows[0].tenant_id, vectors=pairs
            )
        run.after = (rows[-1].tenant_id, rows[-1].id)
        run.done += stored
        run.window.append((time.monotonic(), stored))
        return True

    async def _embed(self, run: SwitchRun, texts: list[str]) -> list[Vector]:
        """The new model's vectors of texts; an `openai` target's requests go several at a time, paced.

        One request at a time, an endpoint's latency bounded the rate, not the requests-per-second
        setting. Requests of RECALLD_EMBEDDING_BATCH_SIZE texts, at most
        RECALLD_EMBEDDING_SWITCH_REQUESTS_IN_FLIGHT at once, each started within the pace. Only the
        embedding runs concurrently: the worker's connection serves one statement at a time.
        """
        settings = self._state.settings
        if run.record["target"]["provider"] != "openai":
            return await run.target.embed_documents(texts, background=True)
        slots = asyncio.Semaphore(settings.embedding_switch_requests_in_flight)

        async def request(part: list[str]) -> list[Vector]:
            async with slots:
                await run.pace(settings.embedding_switch_requests_per_second)
                return await run.target.embed_documents(part, background=True)

        size = settings.embedding_batch_size
        requests = [asyncio.ensure_future(request(texts[i : i + size])) for i in range(0, len(texts), size)]
        try:
            parts = await asyncio.gather(*requests)
        finally:
            for unfinished in requests:  # one failed: the rest are not waited for
                unfinished.cancel()
        return [vector for part in parts for vector in part]

    async def _report(self, conn: asyncpg.Connection, run: SwitchRun, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - run.reported_at < REPORT_SECONDS:
            return
        if run.reported_at == 0.0 or now - run.reported_at > 10 * REPORT_SECONDS:
            async with conn.transaction():
                await see_every_tenant(conn)
                run.total, run.done = await repo.pending_counts(conn)
        run.reported_at = now
        progress = {"state": run.state, "rate": round(run.rate(), 2)}
        await repo.merge_switch_record(conn, {"progress": progress})
        run.record["progress"] = progress
        self._state.embedding_switch = progress_view(run.record, done=run.done, total=run.total)

    async def _cut_over(self, conn: asyncpg.Connection, run: SwitchRun) -> bool:
        """Put the new vectors in place; False when it gave way to requests or locks, to try again later."""
        state = self._state
        old = state.embedder
        target = run.record["target"]
        async with state.model_gate.closed(drain_seconds=DRAIN_SECONDS) as drained:
            if not drained:
                log.info("embedding switch: requests still running; the cut-over waits")
                return False
            try:
                async with conn.transaction():
                    await repo.lock_for_cut_over(conn, wait_seconds=LOCK_SECONDS)
                    if (await repo.switch_record(conn) or {}).get("id") != run.record["id"]:
                        return False  # aborted (another switch may have started) since the step read it
                    await see_every_tenant(conn)
                    if not await self._embed_rest(conn, run):  # many written since the pass: one more
                        run.after = None
                        return True
                    await repo.cut_over(conn, run.record["column"])
                    await repo.replace_recorded_model(conn, target)
                    await repo.delete_switch_record(conn)
            except asyncpg.LockNotAvailableError:
                log.info("embedding switch: the tables are busy; the cut-over waits")
                return False
            except _NewModelFailed:
                return False
            # Pooled connections prepared statements against the old columns: replaced on next use.
            await state.pool.expire_connections()
            await state.check_pool.expire_connections()
            state.vector_indexes.clear()
            state.embedder = run.target
            if old is not None:
                old.withdraw_switch_target(run.target)
        self._run = None
        self._state.embedding_switch = None
        if old is not None:
            old.close()
        log.info(
            "embedding switch to %s: done, %d memories; serve with %s from now on",
            label(target),
            run.done,
            serve_hint(target),
        )
        return True

    async def _embed_rest(self, conn: asyncpg.Connection, run: SwitchRun) -> bool:
        """Inside the cut-over, under its lock: embed the memories still without a new vector, if one batch holds them.

        Nothing changes under the lock, so once these are stored none is left: a write in flight when
        the gate closed, or one whose new-model vector failed, cannot send the cut-over back to
        another pass (under a steady writer there always is one). False when more than a batch is
        left: a pass with the gate open embeds them first.
        """
        limit = self._state.settings.embedding_switch_batch_size
        rows: list[repo.PendingRow] = []
        after = None
        while len(rows) <= limit:
            found = await repo.pending_rows(conn, after=after, limit=limit + 1 - len(rows))
            if not found:
                break
            rows += found
            after = (found[-1].tenant_id, found[-1].id)
        if len(rows) > limit:
            return False
        if not rows:
            return True
        try:
            vectors = await self._embed(run, embedding_texts(rows))
        except Exception as exc:
            run.back_off(exc)
            raise _NewModelFailed from exc
        stored = 0
        for tenant_id, pairs in itertools.groupby(
            zip(rows, vectors, strict=True), key=lambda p: p[0].tenant_id
        ):
            stored += await repo.store_pending(
                conn, switch_id=run.record["id"], tenant_id=tenant_id, vectors=list(pairs)
            )
        run.done += stored
        # Under the lock every one is stored; were one not, the cut-over would leave it without a vector.
        return stored == len(rows)

    async def _abort(self, conn: asyncpg.Connection) -> None:
        state = self._state
        async with state.model_gate.closed(drain_seconds=DRAIN_SECONDS) as drained:
            if not drained:
                return
            # No write in flight: none lends the new model from here on, so the column can go.
            self._detach()
            try:
                async with conn.transaction():
                    await conn.execute(f"SET LOCAL lock_timeout = '{int(LOCK_SECONDS * 1000)}ms'")
                    await repo.drop_pending_column(conn)
                    await repo.delete_switch_record(conn)
            except asyncpg.LockNotAvailableError:
                return
        log.info("embedding switch aborted; the stored vectors stay as they were")
