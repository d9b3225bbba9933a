"""Subcommands that talk to a running recalld over HTTP: index, eval, bench."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import asyncpg

from app.cli.common import CliError, api_key, prepare_database, with_connection
from app.infra.config import Settings
from app.infra.db import connect
from app.services import tenants as tenant_service


def cmd_index(args: argparse.Namespace, settings: Settings) -> int:
    import httpx

    from recalld_tools.upload.indexer import error_message, index_markdown, watch

    root = Path(args.directory)
    if not root.is_dir():
        raise CliError(f"{root} is not a directory")
    headers = {"Authorization": f"Bearer {api_key(args, settings)}"}
    # Markdown files this command uploaded or saw unchanged: while watching, one of them
    # disappearing from disk is forgotten on the server too (and nothing else is).
    seen: set[str] = set()
    with httpx.Client(base_url=args.url, headers=headers, timeout=300.0) as client:

        def run() -> Any:
            if args.code:
                from recalld_tools.upload.code_indexer import index_code

                return index_code(client, root, repository=args.repository or root.resolve().name)
            result = index_markdown(client, root, scope=args.scope, progress=not seen, forget=seen)
            seen.clear()
            seen.update(result.present)
            return result

        try:
            stats = run()
        except httpx.HTTPStatusError as exc:
            raise CliError(
                f"recalld at {args.url} answered {exc.response.status_code}: {error_message(exc.response)}"
            ) from exc
        except httpx.HTTPError as exc:
            raise CliError(f"cannot reach recalld at {args.url}: {exc}") from exc
        print(stats.summary())
        for error in stats.errors:
            print(f"  failed: {error}", file=sys.stderr)
        if args.watch:
            print(f"watching {root} for changes (Ctrl-C stops)", file=sys.stderr)
            watch(root, run)
    return 1 if stats.failed else 0


def _eval_sets(args: argparse.Namespace) -> list[Any]:
    from recalld_tools.evaluation.locomo import TurnFormat
    from recalld_tools.evaluation.sets import load_set, short_queries

    formats: list[TurnFormat] = (
        ["episodes", "transcript"] if args.locomo_format == "both" else [args.locomo_format]
    )
    sets = []
    for p in args.datasets:
        # A BEIR folder reads the same in every format: once is enough.
        loaded = {s.name: s for s in (load_set(Path(p), f) for f in formats)}
        for s in loaded.values():
            sets += [s.limited(args.limit_queries)]
            if args.short_queries:
                sets += [short_queries(s).limited(args.limit_queries)]
    return sets


def cmd_eval(args: argparse.Namespace, settings: Settings) -> int:
    import httpx

    from recalld_tools.evaluation import abstention
    from recalld_tools.evaluation.runner import (
        DEFAULT_RUNS,
        Run,
        SetReport,
        TermIdf,
        cross_conversation_probes,
        cross_set_probes,
        dump_legs,
        evaluate,
        ingest,
        keyword_agreement,
        negative_sources,
        positive_probes,
        summary_markdown,
    )
    from recalld_tools.evaluation.sets import EvalSet

    try:
        sets: list[EvalSet] = _eval_sets(args)
        runs = [Run.parse(r) for r in args.runs or DEFAULT_RUNS]
    except (OSError, ValueError) as exc:
        raise CliError(str(exc)) from exc
    if args.url and len(sets) > 1:
        # BM25's statistics are the tenant's own: two sets in one tenant would change each other's scores.
        raise CliError("--url evaluates one set at a time (its key's tenant would mix the sets)")
    dump_dir = Path(args.dump_legs) if args.dump_legs else None
    if dump_dir is not None:
        dump_dir.mkdir(parents=True, exist_ok=True)
        for old in dump_dir.glob("*.jsonl"):
            old.unlink()

    Target = tuple[EvalSet, httpx.AsyncClient, TermIdf | None]

    async def run_sets(targets: list[Target]) -> tuple[list[SetReport], str | None]:
        reports = []
        for eval_set, client, idf in targets:
            seconds = await ingest(client, eval_set)
            if dump_dir is not None:
                await dump_legs(client, positive_probes(eval_set), dump_dir / f"{eval_set.name}.jsonl", idf)
            results, ranker = await evaluate(client, eval_set, runs, limit=args.limit)
            report = SetReport(eval_set, seconds, ranker, results)
            if any(run.mode == "keyword" for run in runs):
                report.keyword_agreement = await keyword_agreement(client, eval_set)
            reports.append(report)
        if not args.abstention:
            return reports, None
        positives, negatives = [], []
        for eval_set, client, _ in targets:
            positives += await abstention.ask_probes(
                client, positive_probes(eval_set), f"{eval_set.name} positives"
            )
        for i, (eval_set, client, idf) in enumerate(targets):
            # Other families' questions, nearest set before it first: negatives of every kind in
            # every tenant, not one pairing.
            others = [other for other, _, _ in targets[i - 1 :: -1] + targets[:i:-1]]
            sources = negative_sources(eval_set, others)
            probes = [p for source in sources for p in cross_set_probes(source, eval_set)]
            probes += cross_conversation_probes(eval_set)
            negatives += await abstention.ask_probes(client, probes, f"negatives in {eval_set.name}")
            if dump_dir is not None:
                await dump_legs(client, probes, dump_dir / "negatives.jsonl", idf)
        return reports, abstention.markdown(positives, negatives)

    async def in_process() -> tuple[list[SetReport], str | None]:
        from app.main import create_app
        from app.repositories.keyword_stats import query_term_idf
        from app.retrieval.query import keyword_query_text, parse_query

        # One tenant per set in the configured database, written through the normal API path;
        # --reuse keeps it under a name derived from the set's content, so the next run skips loading.
        dsn = await prepare_database(settings)
        conn = await connect(dsn)
        created: list[str] = []

        def idf_of(tenant_id: str) -> TermIdf:
            async def idf(text: str) -> list[float]:
                query = keyword_query_text(parse_query(text))
                return await query_term_idf(conn, tenant_ids=[tenant_id], query_text=query) if query else []

            return idf

        try:
            # The eval's own server measures quality: its per-key rate limit would only slow the run.
            app = create_app(settings.model_copy(update={"rate_limit_per_second": 0}))
            async with app.router.lifespan_context(app), AsyncExitStack() as stack:
                targets: list[Target] = []
                # This run's tenant per set name: a set stored as another asks that set's tenant.
                loaded: dict[str, Any] = {}
                for eval_set in sets:
                    name = f"eval-{eval_set.name}-{eval_set.fingerprint()}"
                    known = {t.name: t for t in await tenant_service.list_tenants(conn)}
                    tenant = known.get(name) if args.reuse else None
                    if eval_set.stored_as is not None:
                        tenant = loaded[eval_set.stored_as]
                    if tenant is None:
                        tenant_name = name if args.reuse else f"eval-{os.urandom(4).hex()}"
                        tenant = await tenant_service.create_tenant(conn, tenant_name)
                        if not args.reuse:
                            created.append(tenant.id)
                    key = await tenant_service.create_key(
                        conn, tenant=tenant.name, role="writer", operator=False
                    )
                    client = await stack.enter_async_context(
                        httpx.AsyncClient(
                            transport=httpx.ASGITransport(app=app),
                            base_url="http://recalld",
                            headers={"Authorization": f"Bearer {key}"},
                            timeout=600,
                        )
                    )
                    loaded[eval_set.name] = tenant
                    targets.append((eval_set, client, idf_of(tenant.id)))
                return await run_sets(targets)
        finally:
            for tenant_id in created:
                await tenant_service.delete_tenant(conn, tenant_id)
            await conn.close()

    async def remote() -> tuple[list[SetReport], str | None]:
        headers = {"Authorization": f"Bearer {api_key(args, settings)}"}
        async with httpx.AsyncClient(base_url=args.url, headers=headers, timeout=600) as client:
            return await run_sets([(s, client, None) for s in sets])

    reports, abstained = asyncio.run(remote() if args.url else in_process())
    print(f"limit {args.limit}; headline metric per set (nDCG@10, or evidence recall@10 for conversations)")
    print("quality is measured with min_score 0 (the best-effort list), comparable across versions\n")
    print(summary_markdown(reports))
    for report in reports:
        print()
        print(report.markdown())
    if abstained is not None:
        print("\n### Abstention: default settings against `min_score: 0`, default fusion\n")
        print(abstained)
    return 0


MEMORY_BENCH_MODES = ("keyword", "semantic", "hybrid", "recall")


def _noisy_bench(args: argparse.Namespace, settings: Settings, key: str) -> None:
    """--scenario noisy: a second tenant sends keyword queries that match nothing (docs/benchmarks.md)."""
    from recalld_tools.evaluation.noisy_bench import run_noisy_bench

    async def noisy_key(conn: asyncpg.Connection) -> str:
        tenant = await tenant_service.create_tenant(conn, f"bench-noisy-{os.urandom(3).hex()}")
        return await tenant_service.create_key(conn, tenant=tenant.name, role="writer", operator=False)

    other: str = asyncio.run(with_connection(settings, noisy_key))
    report = run_noisy_bench(
        args.url, key, other, size=args.size, duration=args.duration, load=not args.skip_load
    )
    print(report.markdown())


def _neighbours_bench(args: argparse.Namespace, key: str) -> None:
    """--scenario neighbours: one tenant with and without other tenants' data (docs/benchmarks.md)."""
    from recalld_tools.evaluation import bench
    from recalld_tools.evaluation.neighbours_bench import run_neighbours_bench

    if not args.baseline_url or not args.baseline_key:
        raise CliError(
            "--scenario neighbours needs --baseline-url and --baseline-key (the same tenant alone)"
        )
    modes = args.modes or ["hybrid"]
    unknown = sorted(set(modes) - set(MEMORY_BENCH_MODES))
    if unknown:
        raise CliError(f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MEMORY_BENCH_MODES)}")
    reports = run_neighbours_bench(
        (args.url, key),
        (args.baseline_url, args.baseline_key),
        size=args.size,
        load=not args.skip_load,
        modes=modes,
        rounds=args.rounds,
        duration=args.duration,
        warmup=args.warmup,
        seed=args.seed,
    )
    for report in reports:
        print()
        print(report.markdown())
    overlap = bench.recall_against_exact(args.url, key, bench.generate_queries(100, seed=999))
    print(f"\nsemantic recall@10 against exact search with neighbours (100 queries): {overlap:.3f}")


def cmd_bench(args: argparse.Namespace, settings: Settings) -> int:
    from recalld_tools.evaluation import bench

    key = api_key(args, settings)
    if args.scenario == "code":
        from recalld_tools.evaluation.code_bench import CodeBenchError, run_code_bench

        try:
            run_code_bench(
                args.url,
                key,
                args.code_dirs,
                args.modes,
                args.concurrency,
                args.duration,
                args.skip_load,
                args.seed,
            )
        except CodeBenchError as exc:
            raise CliError(str(exc)) from exc
        return 0
    if args.scenario == "noisy":
        _noisy_bench(args, settings, key)
        return 0
    if args.scenario == "neighbours":
        _neighbours_bench(args, key)
        return 0
    if args.scenario == "scale":
        from recalld_tools.evaluation.scale_bench import run_scale_bench

        run_scale_bench(
            args.url,
            key,
            sizes=args.sizes,
            modes=args.modes or ["keyword"],
            concurrency=args.concurrency,
            duration_s=args.duration,
            seed=args.seed,
            stability_mode=args.stability_mode,
        )
        return 0
    if args.size and not args.skip_load:
        stats = bench.load_corpus(args.url, key, bench.generate_memories(args.size, seed=1))
        print(f"loaded {stats.items} memories in {stats.seconds:.1f}s ({stats.per_second:.0f}/s)", flush=True)
    if args.noise_tenants and not args.skip_load:

        async def noise_keys(conn: asyncpg.Connection) -> list[str]:
            keys = []
            for n in range(args.noise_tenants):
                tenant = await tenant_service.create_tenant(conn, f"bench-noise-{os.urandom(3).hex()}-{n}")
                keys.append(
                    await tenant_service.create_key(conn, tenant=tenant.name, role="writer", operator=False)
                )
            return keys

        keys: list[str] = asyncio.run(with_connection(settings, noise_keys))
        if keys and not bench.key_is_known(args.url, keys[0]):
            where = (
                "DATABASE_URL"
                if settings.database_url
                else f"the data directory {settings.resolved_data_dir}"
            )
            raise CliError(
                f"the noise tenants were created in {where}, but the server at {args.url} does not "
                "know their keys: run bench with the server's RECALLD_DATA_DIR or DATABASE_URL"
            )
        per_tenant = args.noise_size // max(args.noise_tenants, 1)
        for n, noise_key in enumerate(keys):
            bench.load_corpus(
                args.url, noise_key, bench.generate_memories(per_tenant, seed=100 + n), progress=False
            )
            print(f"noise tenant {n + 1}/{len(keys)} loaded ({per_tenant} memories)", flush=True)
    results = []
    modes = args.modes or list(MEMORY_BENCH_MODES)
    unknown = sorted(set(modes) - set(MEMORY_BENCH_MODES))
    if unknown:
        raise CliError(f"unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MEMORY_BENCH_MODES)}")
    if args.warmup > 0:
        # Memory texts, never a query string: the warm-up fills PostgreSQL's buffers, not the
        # query-embedding cache the measured runs must find cold.
        bench.run_load(
            args.url,
            key,
            scenario=args.scenario,
            endpoint="search",
            mode="hybrid",
            queries=bench.generate_memories(2000, seed=4242),
            concurrency=1,
            duration_s=args.warmup,
        )
    runs = [(c, m) for c in args.concurrency for m in modes]
    for run, (concurrency, mode) in enumerate(runs):
        # Fresh queries per run: a mode must not be measured on embeddings another one cached.
        queries = bench.generate_queries(5000, seed=args.seed * 100 + run)
        results.append(
            bench.run_load(
                args.url,
                key,
                scenario=args.scenario,
                endpoint="recall" if mode == "recall" else "search",
                mode=mode,
                queries=queries,
                concurrency=concurrency,
                duration_s=args.duration,
            )
        )
        print(bench.format_results(results[-1:]).splitlines()[-1], flush=True)
    print()
    print(bench.format_results(results))
    overlap = bench.recall_against_exact(args.url, key, bench.generate_queries(100, seed=999))
    print(f"\nsemantic recall@10 against exact search (100 queries): {overlap:.3f}")
    return 0
