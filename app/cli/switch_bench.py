"""An embedding model switch measured under load: items/s, errors, lost writes, vectors of the new model.

    python -m app.cli.switch_bench --data-dir /tmp/sw-bench --memories 5000 \\
        [--searchers 4] [--writers 1] [--round-trip] [--requests-per-second 0] \\
        [--requests-in-flight 4] [--switch-batch-size 128] [--stub-latency 0]

One process serves a fresh data directory with the local MiniLM (384), loads `--memories`
synthetic memories, then switches to an OpenAI-compatible 768-dimension model and (with
--round-trip) back to the local model, while `--searchers` clients search and `--writers` write
without pause. The 768-dimension endpoint is tests/embedding_stub.py, a labelled TEST DOUBLE
(deterministic vectors; a checkout is needed): what it measures is recalld's switch, not a model.
`--stub-latency` makes the double wait that long before each answer, as a distant or loaded API does.
Prints one markdown row per switch for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from app.auth import mint_key
from app.infra.config import Settings
from app.infra.db import connect, resolve_dsn
from app.main import create_app
from app.repositories import tenants as tenant_repo
from app.services import embedding_switch as switching
from app.state import ServiceState
from recalld_tools.evaluation.bench import generate_memories, generate_queries


async def _key(settings: Settings) -> str:
    owner = await connect(await resolve_dsn(settings))
    try:
        tenant = await tenant_repo.create_tenant(owner, name=f"switch-{uuid.uuid4().hex[:6]}")
        key = mint_key()
        await tenant_repo.insert_api_key(
            owner,
            tenant_id=tenant.id,
            prefix=key.prefix,
            key_hash=key.key_hash,
            role="writer",
            operator=False,
        )
        return key.plain
    finally:
        await owner.close()


async def _vectors(settings: Settings) -> dict[uuid.UUID, Any]:
    owner = await connect(await resolve_dsn(settings))
    try:
        await owner.execute(
            "SELECT set_config('recalld.tenant_ids', coalesce(string_agg(id::text, ','), ''), false) FROM tenant"
        )
        rows = await owner.fetch("SELECT id, embedding FROM memory")
    finally:
        await owner.close()
    return {r["id"]: np.asarray(r["embedding"].to_numpy(), dtype=np.float64) for r in rows}


def _code(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return "?"


async def _switch(
    app: Any,
    settings: Settings,
    http: httpx.AsyncClient,
    headers: dict[str, str],
    args: argparse.Namespace,
    **to: Any,
) -> dict[str, Any]:
    state: ServiceState = app.state.service
    queries = generate_queries(200)
    errors: list[str] = []
    written: list[str] = []
    search_ms: list[float] = []
    write_ms: list[float] = []
    stop = asyncio.Event()

    async def searcher(n: int) -> None:
        i = n
        while not stop.is_set():
            sent = time.perf_counter()
            r = await http.post("/v1/search", json={"query": queries[i % len(queries)]}, headers=headers)
            search_ms.append((time.perf_counter() - sent) * 1000)
            if r.status_code != 200:
                errors.append(f"search {r.status_code} {_code(r)}")
            i += 1

    # Distinct per switch: a round trip's second switch repeating the first's texts would get the
    # stored memory back (200, one memory per content) instead of a new one.
    run = uuid.uuid4().hex[:8]

    async def writer(n: int) -> None:
        i = 0
        while not stop.is_set():
            sent = time.perf_counter()
            r = await http.post(
                "/v1/facts", json={"content": f"written during the switch {run} {n}-{i}"}, headers=headers
            )
            write_ms.append((time.perf_counter() - sent) * 1000)
            if r.status_code == 201:
                written.append(r.json()["id"])
            else:
                errors.append(f"write {r.status_code} {_code(r)}")
            i += 1

    owner = await connect(await resolve_dsn(settings))
    try:
        started = time.monotonic()
        await switching.start_switch(owner, settings, api_key_file=None, **to)
        tasks = [asyncio.create_task(searcher(n)) for n in range(args.searchers)]
        tasks += [asyncio.create_task(writer(n)) for n in range(args.writers)]

        def switched() -> bool:
            identity = state.embedder.identity if state.embedder else None
            return (
                identity is not None
                and identity.provider == to["provider_name"]
                and to["model"] in (None, identity.model)
            )

        while True:  # the cut-over swaps the service's embedder
            if switched():
                break
            await asyncio.sleep(0.2)
        seconds = time.monotonic() - started
        stop.set()
        await asyncio.gather(*tasks)
        await owner.execute(
            "SELECT set_config('recalld.tenant_ids', coalesce(string_agg(id::text, ','), ''), false) FROM tenant"
        )
        row = await owner.fetchrow(
            "SELECT count(*) AS n, count(embedding) AS e, max(vector_dims(embedding)) AS d, "
            "min(vector_dims(embedding)) AS dmin FROM memory"
        )
        present = await owner.fetchval(
            "SELECT count(*) FROM memory WHERE id = ANY($1::uuid[])", [uuid.UUID(w) for w in written]
        )
    finally:
        await owner.close()
    assert row is not None
    return {
        "to": f"{state.embedder.identity.provider}/{state.embedder.identity.model}"
        if state.embedder
        else "?",
        "memories": row["n"],
        "seconds": seconds,
        "rate": row["n"] / seconds,
        "errors": len(errors),
        "error_kinds": dict(Counter(errors)),
        "written": len(written),
        "lost": len(written) - present,
        "searches": len(search_ms),
        # The slowest request: what a client felt of the cut-over, which holds requests back.
        "search_p50_ms": float(np.median(search_ms)) if search_ms else 0.0,
        "search_max_ms": max(search_ms, default=0.0),
        "write_max_ms": max(write_ms, default=0.0),
        "all_new": row["n"] == row["e"] and row["d"] == row["dmin"] == state.embedder.identity.dim
        if state.embedder
        else False,
    }


async def main(args: argparse.Namespace) -> None:
    """Run the switches and print their rows."""
    try:
        from tests.embedding_stub import embedding_stub
    except ImportError as exc:  # pragma: no cover - a wheel has no tests
        raise SystemExit(
            "run from a recalld checkout: the 768-dimension endpoint is tests/embedding_stub.py"
        ) from exc
    with embedding_stub(768, latency_seconds=args.stub_latency) as (url, _):
        settings = Settings(
            data_dir=Path(args.data_dir),
            database_url=None,
            embedding_provider="local",
            embedding_switch_requests_per_second=args.requests_per_second,
            embedding_switch_requests_in_flight=args.requests_in_flight,
            embedding_switch_batch_size=args.switch_batch_size,
        )
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            headers = {"Authorization": f"Bearer {await _key(settings)}"}
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench", timeout=120) as http:
                texts = generate_memories(args.memories)
                for start in range(0, len(texts), 500):
                    items = [{"type": "fact", "content": t} for t in texts[start : start + 500]]
                    r = await http.post("/v1/memories:batch", json={"items": items}, headers=headers)
                    r.raise_for_status()
                before = await _vectors(settings)
                agreement = None
                rows = [
                    await _switch(
                        app,
                        settings,
                        http,
                        headers,
                        args,
                        provider_name="openai",
                        model="stub-768",
                        dim=768,
                        base_url=url,
                    )
                ]
                if args.round_trip:
                    rows.append(
                        await _switch(
                            app,
                            settings,
                            http,
                            headers,
                            args,
                            provider_name="local",
                            model=None,
                            dim=None,
                            base_url=None,
                        )
                    )
                    after = await _vectors(settings)
                    # Back on the same model, every memory's vector should be what it was before.
                    agreement = min(float(np.dot(before[k], after[k])) for k in before)
    load = os.getloadavg()
    print(
        f"load average {load[0]:.2f}; {args.searchers} searchers, {args.writers} writers; "
        f"{args.switch_batch_size} memories per step, at most {args.requests_in_flight} requests in flight, "
        f"the double answering after {args.stub_latency} s"
    )
    if agreement is not None:
        print(
            f"after the round trip, the lowest cosine of a memory's vector to its vector before: {agreement:.6f}"
        )
    print(
        "| switch to | memories | seconds | items/s | errors | writes during | lost | searches "
        "| search p50 / max ms | slowest write ms | all new vectors |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        if row["error_kinds"]:
            print(f"errors of the switch to {row['to']}: {row['error_kinds']}")
    for row in rows:
        print(
            f"| {row['to']} | {row['memories']} | {row['seconds']:.1f} | {row['rate']:.0f} | {row['errors']} "
            f"| {row['written']} | {row['lost']} | {row['searches']} "
            f"| {row['search_p50_ms']:.0f} / {row['search_max_ms']:.0f} | {row['write_max_ms']:.0f} "
            f"| {'yes' if row['all_new'] else 'NO'} |"
        )


def cli() -> None:
    """Parse arguments and run."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", required=True, help="a fresh (or empty) data directory")
    parser.add_argument("--memories", type=int, default=5000)
    parser.add_argument("--searchers", type=int, default=4)
    parser.add_argument("--writers", type=int, default=1)
    parser.add_argument("--round-trip", action="store_true", help="switch back to the local model afterwards")
    parser.add_argument(
        "--requests-per-second", type=float, default=0.0, help="the switch's pacing (0: none)"
    )
    parser.add_argument(
        "--requests-in-flight",
        type=int,
        default=Settings.model_fields["embedding_switch_requests_in_flight"].default,
        help="requests the switch keeps in flight to the 768-dimension endpoint",
    )
    parser.add_argument(
        "--switch-batch-size",
        type=int,
        default=Settings.model_fields["embedding_switch_batch_size"].default,
        help="memories the switch re-embeds per step",
    )
    parser.add_argument(
        "--stub-latency", type=float, default=0.0, help="seconds the test double waits before each answer"
    )
    asyncio.run(main(parser.parse_args()))


if __name__ == "__main__":
    cli()
