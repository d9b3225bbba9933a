"""Keeps the embedded PostgreSQL running: restarts it when it dies, and says when it is down."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from app.infra.embedded_pg import postmaster_running, restart_embedded

log = logging.getLogger("recalld.supervisor")

POLL_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 10.0


class EmbeddedSupervisor:
    """Polls the postmaster; restarts it with backoff. `running` feeds /healthz."""

    def __init__(self, pgdata: Path) -> None:
        self.pgdata = pgdata
        self.running = True
        self.restarts = 0

    async def watch(self) -> None:
        """Run until cancelled."""
        backoff = POLL_SECONDS
        while True:
            await asyncio.sleep(POLL_SECONDS)
            if await asyncio.to_thread(postmaster_running, self.pgdata):
                self.running = True
                backoff = POLL_SECONDS
                continue
            self.running = False
            log.error("embedded PostgreSQL in %s is not running; restarting it", self.pgdata)
            try:
                await asyncio.to_thread(restart_embedded, self.pgdata)
            except Exception as exc:
                # Old backends may still hold the shared memory for a moment; try again later.
                log.error(
                    "restarting embedded PostgreSQL failed (%s); retrying in %.1f s",
                    type(exc).__name__,
                    backoff,
                )
                await asyncio.sleep(backoff * (1 + random.random()))
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
                continue
            self.restarts += 1
            self.running = True
            log.warning("embedded PostgreSQL restarted (%d restart(s) so far)", self.restarts)


@asynccontextmanager
async def supervised(pgdata: Path) -> AsyncIterator[EmbeddedSupervisor]:
    """Supervise the embedded server for the duration of the block."""
    supervisor = EmbeddedSupervisor(pgdata)
    task = asyncio.create_task(supervisor.watch(), name="embedded-postgres-supervisor")
    try:
        yield supervisor
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
