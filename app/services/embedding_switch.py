"""Switching the embedding model of a deployment that already stores vectors, without downtime.

`recalld embeddings switch` checks the new model, adds the pending column (repositories.
embedding_switch) and records the switch; the serving process's worker (services.
embedding_switch_worker) then embeds every stored memory with the new model in the background
while the service answers from the old vectors, and cuts over when every memory has its new
vector. This module is the switch's state as the CLI and /readyz see it: start, abort, status and
progress. Progress lives in the database (the pending column is the state), so a restart, or a
crash, resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from app.embeddings.base import EmbeddingUnavailable
from app.embeddings.factory import EmbeddingConfigError, provider
from app.infra.config import Settings
from app.repositories import embedding_storage as storage
from app.repositories import embedding_switch as repo
from app.repositories.vector_indexes import see_every_tenant

# How often an idle worker looks for a switch to run (and how long an abort waits on it).
POLL_SECONDS = 2.0
# A worker that has not reported for this long is not running (the CLI then aborts by itself).
WORKER_STALE_SECONDS = 15.0
# The longest the cut-over (or an abort) waits for requests in flight, and for the tables' locks.
DRAIN_SECONDS = 30.0
LOCK_SECONDS = 10.0


class SwitchError(RuntimeError):
    """The switch cannot be started or aborted as asked; the message says why and what to do."""


def target_settings(settings: Settings, record: dict[str, Any]) -> Settings:
    """The settings that build the switch's new model: these, with its provider, model, dim and endpoint."""
    target = record["target"]
    update: dict[str, Any] = {
        "embedding_provider": target["provider"],
        "embedding_model": target["model"],
        "embedding_dim": target["dim"],
    }
    if record.get("base_url"):
        update["openai_base_url"] = record["base_url"]
    if record.get("api_key_file"):
        update["openai_api_key"] = None
        update["openai_api_key_file"] = Path(record["api_key_file"])
    return settings.model_copy(update=update)


def label(model: dict[str, Any]) -> str:
    """A model as the CLI and logs name it: provider/model (n dimensions)."""
    return f"{model['provider']}/{model['model']} ({model['dim']} dimensions)"


async def _resolve_target(asked: Settings, *, provider_name: str) -> dict[str, Any]:
    """{"provider", "model", "dim"} of the model asked for; its endpoint asked for the dimension if not given."""
    try:
        chosen = provider(provider_name)
        if chosen is None:
            raise SwitchError(
                "`none` stores no vectors: start with RECALLD_EMBEDDING_PROVIDER=none instead (searches rank by keyword)"
            )
        name, size = chosen.model(asked), chosen.dim(asked)
        if size is None:
            size = await asyncio.to_thread(chosen.probe_dim, asked)
    except EmbeddingConfigError as exc:
        raise SwitchError(str(exc)) from None
    except EmbeddingUnavailable as exc:
        raise SwitchError(
            f"cannot ask {asked.openai_base_url} for the dimension of {name} ({exc}); pass --dim"
        ) from None
    try:
        storage.column_type(size)
    except ValueError as exc:
        raise SwitchError(str(exc)) from None
    return {"provider": provider_name, "model": name, "dim": size}


async def start_switch(
    conn: asyncpg.Connection,
    settings: Settings,
    *,
    provider_name: str,
    model: str | None,
    dim: int | None,
    base_url: str | None,
    api_key_file: Path | None,
) -> dict[str, Any]:
    """Record a switch to the model asked for (as the schema owner); returns its record."""
    endpoint: dict[str, Any] = {}
    if provider_name == "openai":
        # The endpoint, and where its key is read, travel with the record (the serving process
        # runs the switch); the key itself is never stored.
        endpoint["base_url"] = base_url or settings.openai_base_url
        if api_key_file is not None:
            endpoint["api_key_file"] = str(api_key_file)
    asked = target_settings(
        settings, {"target": {"provider": provider_name, "model": model, "dim": dim}, **endpoint}
    )
    target = await _resolve_target(asked, provider_name=provider_name)
    async with conn.transaction():
        recorded = await storage.recorded_model(conn)
        if recorded is None:
            raise SwitchError(
                "no embedding model is recorded yet: nothing to switch; start `recalld serve` with the "
                "model you want (RECALLD_EMBEDDING_*), it records it"
            )
        running = await repo.switch_record(conn)
        if running is not None:
            if running["target"] == target:
                return running
            raise SwitchError(
                f"a switch to {label(running['target'])} is running; `recalld embeddings abort` it first"
            )
        current = {key: recorded.get(key) for key in ("provider", "model", "dim")}
        if current == target:
            raise SwitchError(f"the stored vectors already are of {label(target)}")
        column = storage.column_type(int(target["dim"]))
        record: dict[str, Any] = {
            "id": str(uuid.uuid4()),
            "source": current,
            "target": target,
            "column": column,
            "state": "running",
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            **endpoint,
        }
        await conn.execute(f"SET LOCAL lock_timeout = '{int(LOCK_SECONDS * 1000)}ms'")
        await repo.add_pending_column(conn, column)
        await repo.put_switch_record(conn, record)
    return record


async def abort_switch(conn: asyncpg.Connection) -> dict[str, Any]:
    """Stop the running switch and drop its pending vectors; the stored model and vectors stay as they were.

    With a worker running (a serving process with the owner's login), the worker does it: it
    first stops lending the new model to writes. Otherwise it is done here.
    """
    record = await repo.switch_record(conn)
    if record is None:
        raise SwitchError("no embedding switch is running")
    if _worker_alive(record):
        await repo.merge_switch_record(conn, {"state": "aborting"})
        deadline = time.monotonic() + DRAIN_SECONDS + LOCK_SECONDS + 2 * POLL_SECONDS
        while time.monotonic() < deadline:
            if await repo.switch_record(conn) is None:
                return record
            await asyncio.sleep(0.2)
        raise SwitchError(
            "the serving process has not finished the abort yet; `recalld embeddings status` shows when it has"
        )
    async with conn.transaction():
        await conn.execute(f"SET LOCAL lock_timeout = '{int(LOCK_SECONDS * 1000)}ms'")
        await repo.drop_pending_column(conn)
        await repo.delete_switch_record(conn)
    return record


def _worker_alive(record: dict[str, Any]) -> bool:
    heartbeat = record.get("heartbeat")
    return heartbeat is not None and time.time() - float(heartbeat) < WORKER_STALE_SECONDS


@dataclass(frozen=True, slots=True)
class SwitchStatus:
    """What `recalld embeddings status` shows about a running switch."""

    record: dict[str, Any]
    done: int
    total: int
    worker_alive: bool


async def switch_status(conn: asyncpg.Connection) -> SwitchStatus | None:
    """The running switch with fresh counts (as the owner, every tenant), or None."""
    async with conn.transaction():
        record = await repo.switch_record(conn)
        if record is None:
            return None
        await see_every_tenant(conn)
        total, done = await repo.pending_counts(conn)
    return SwitchStatus(record, done, total, _worker_alive(record))


def progress_view(record: dict[str, Any], *, done: int, total: int) -> dict[str, Any]:
    """The progress /readyz and the CLI show: items done/total, rate, ETA, state."""
    progress = record.get("progress", {})
    rate = float(progress.get("rate") or 0.0)
    left = max(total - done, 0)
    return {
        "state": progress.get("state", record.get("state")),
        "source": record["source"],
        "target": record["target"],
        "started_at": record.get("started_at"),
        "done": done,
        "total": total,
        "rate_per_second": round(rate, 1),
        "eta_seconds": (math.ceil(left / rate) if rate > 0 else None) if left else 0,
    }
