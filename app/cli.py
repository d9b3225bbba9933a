"""The `recalld` command: serve, migrate, tenants, keys, scopes, index, eval, bench."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg

from app.config import Settings, get_settings
from app.db import connect, resolve_dsn
from app.errors import ApiError
from app.services import tenants as tenant_service
from app.startup import StartupError, ensure_schema

log = logging.getLogger("recalld.cli")


class CliError(Exception):
    """A failure to report on stderr with exit code 1 (no traceback)."""


async def _prepare(settings: Settings, *, migrate: bool | None = None) -> str:
    """Resolve the database, bring the schema to head when allowed; returns the DSN."""
    dsn = await resolve_dsn(settings)
    await ensure_schema(dsn, migrate=settings.database_url is None if migrate is None else migrate)
    return dsn


async def _with_connection(settings: Settings, work: Callable[[asyncpg.Connection], Awaitable[Any]]) -> Any:
    dsn = await _prepare(settings)
    conn = await connect(dsn)
    try:
        return await work(conn)
    finally:
        await conn.close()


def _cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from app.main import create_app

    settings = settings.model_copy(
        update={"host": args.host or settings.host, "port": args.port or settings.port}
    )
    # The startup line says which keyword ranker and embedder are active (SPEC §1: logs and /readyz).
    logging.getLogger("recalld").setLevel(settings.log_level.upper())

    async def prepare() -> str | None:
        return await _with_connection(  # type: ignore[no-any-return]
            settings, lambda conn: tenant_service.bootstrap(conn, settings.admin_key_path)
        )

    key = asyncio.run(prepare())
    if key is not None:
        print(
            f"Created tenant 'default' with an admin key (shown once, also saved to {settings.admin_key_path}):\n"
            f"  {key}",
            flush=True,
        )
    print(f"recalld listening on http://{settings.host}:{settings.port} (docs at /docs)", flush=True)
    # uvicorn shuts down gracefully, then re-raises the signal it caught to the previous handler.
    # Make that handler a normal exit, so atexit stops the embedded PostgreSQL as well.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level)
    return 0


def _cmd_migrate(_: argparse.Namespace, settings: Settings) -> int:
    asyncio.run(_prepare(settings, migrate=True))
    print("database schema is at head")
    return 0


def _cmd_tenants(args: argparse.Namespace, settings: Settings) -> int:
    async def work(conn: asyncpg.Connection) -> None:
        if args.tenants_command == "create":
            print((await tenant_service.create_tenant(conn, args.name)).id)
        else:
            for tenant in await tenant_service.list_tenants(conn):
                print(f"{tenant.name}\t{tenant.id}")

    asyncio.run(_with_connection(settings, work))
    return 0


def _cmd_keys(args: argparse.Namespace, settings: Settings) -> int:
    async def work(conn: asyncpg.Connection) -> None:
        if args.keys_command == "create":
            print(
                await tenant_service.create_key(
                    conn, tenant=args.tenant, role=args.role, operator=args.operator
                )
            )
            return
        count = await tenant_service.revoke_keys(conn, args.key_prefix)
        print(f"revoked {count} key(s)", file=sys.stderr)

    asyncio.run(_with_connection(settings, work))
    return 0


def _cmd_scopes(args: argparse.Namespace, settings: Settings) -> int:
    from app.services.scopes import check_scope_name, parse_butler_toml, store_scope_settings

    try:
        text = Path(args.file).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {args.file}: {exc}") from exc
    try:
        name, scope_settings = parse_butler_toml(text)
    except ApiError as exc:
        problems = "".join(
            f"\n  {'.'.join(str(p) for p in d.get('loc', ()))}: {d.get('msg')}" for d in exc.details or ()
        )
        raise CliError(f"{args.file}: {exc.message}{problems}") from exc
    scope = args.scope or name
    if not scope:
        raise CliError("butler.toml has no [butler] name; pass --scope")
    check_scope_name(scope)

    async def work(conn: asyncpg.Connection) -> None:
        tenant = await tenant_service.tenant_by_name(conn, args.tenant)
        await store_scope_settings(conn, tenant_id=tenant.id, scope=scope, settings=scope_settings)
        print(f"imported settings for scope {scope!r} of tenant {args.tenant!r}", file=sys.stderr)

    asyncio.run(_with_connection(settings, work))
    return 0


def _api_key(args: argparse.Namespace, settings: Settings) -> str:
    key = args.key or os.environ.get("RECALLD_API_KEY")
    if key:
        return str(key)
    if settings.admin_key_path.exists():
        return settings.admin_key_path.read_text().strip()
    raise CliError("no API key: pass --key, set RECALLD_API_KEY, or run `recalld serve` once to create one")


def _cmd_index(args: argparse.Namespace, settings: Settings) -> int:
    import httpx

    from app.ingest.indexer import error_message, index_markdown, watch

    root = Path(args.directory)
    if not root.is_dir():
        raise CliError(f"{root} is not a directory")
    headers = {"Authorization": f"Bearer {_api_key(args, settings)}"}
    # Markdown files this command uploaded or saw unchanged: while watching, one of them
    # disappearing from disk is forgotten on the server too (and nothing else is).
    seen: set[str] = set()
    with httpx.Client(base_url=args.url, headers=headers, timeout=300.0) as client:

        def run() -> Any:
            if args.code:
                from app.ingest.code_indexer import index_code

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


def _cmd_eval(args: argparse.Namespace, settings: Settings) -> int:
    import httpx

    from app.evaluation.beir import load_beir
    from app.evaluation.runner import EvalReport, evaluate, ingest

    dataset = load_beir(Path(args.dataset))
    if args.limit_queries:
        keep = sorted(dataset.queries)[: args.limit_queries]
        dataset = type(dataset)(dataset.corpus, {q: dataset.queries[q] for q in keep}, dataset.qrels)

    async def run(client: httpx.AsyncClient) -> EvalReport:
        seconds = await ingest(client, dataset)
        results, ranker = await evaluate(client, dataset, args.modes, fusion=args.fusion)
        report = EvalReport(len(dataset.corpus), len(dataset.queries), seconds, ranker)
        report.results = results
        return report

    async def in_process() -> EvalReport:
        from app.main import create_app

        # A throwaway tenant in the configured database, written through the normal API path.
        dsn = await _prepare(settings)
        conn = await connect(dsn)
        try:
            tenant = await tenant_service.create_tenant(conn, f"eval-{os.urandom(4).hex()}")
            key = await tenant_service.create_key(conn, tenant=tenant.name, role="writer", operator=False)
            app = create_app(settings)
            try:
                async with app.router.lifespan_context(app):
                    transport = httpx.ASGITransport(app=app)
                    headers = {"Authorization": f"Bearer {key}"}
                    async with httpx.AsyncClient(
                        transport=transport, base_url="http://recalld", headers=headers, timeout=600
                    ) as client:
                        return await run(client)
            finally:
                await tenant_service.delete_tenant(conn, tenant.id)
        finally:
            await conn.close()

    async def remote() -> EvalReport:
        headers = {"Authorization": f"Bearer {_api_key(args, settings)}"}
        async with httpx.AsyncClient(base_url=args.url, headers=headers, timeout=600) as client:
            return await run(client)

    report = asyncio.run(remote() if args.url else in_process())
    print(report.markdown())
    return 0


MEMORY_BENCH_MODES = ("keyword", "semantic", "hybrid", "recall")


def _cmd_bench(args: argparse.Namespace, settings: Settings) -> int:
    from app.evaluation import bench

    key = _api_key(args, settings)
    if args.scenario == "code":
        from app.evaluation.code_bench import CodeBenchError, run_code_bench

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

        keys: list[str] = asyncio.run(_with_connection(settings, noise_keys))
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="recalld", description="Memory and context retrieval for AI agents."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="start the HTTP service (embedded PostgreSQL unless DATABASE_URL)")
    serve.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (default 8080)")
    serve.set_defaults(handler=_cmd_serve)

    migrate = sub.add_parser("migrate", help="upgrade the database schema to head")
    migrate.set_defaults(handler=_cmd_migrate)

    tenants = sub.add_parser("tenants", help="manage tenants")
    tenants_sub = tenants.add_subparsers(dest="tenants_command", required=True)
    tenants_create = tenants_sub.add_parser("create", help="create a tenant; prints its id")
    tenants_create.add_argument("name")
    tenants_sub.add_parser("list", help="list tenants")
    tenants.set_defaults(handler=_cmd_tenants)

    keys = sub.add_parser("keys", help="manage API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    keys_create = keys_sub.add_parser("create", help="create a key; prints only the key")
    keys_create.add_argument("--tenant", required=True)
    keys_create.add_argument("--role", required=True, choices=["reader", "writer", "admin"])
    keys_create.add_argument("--operator", action="store_true", help="may search across tenants when asked")
    keys_revoke = keys_sub.add_parser("revoke", help="revoke a key by its prefix (or the whole key)")
    keys_revoke.add_argument("key_prefix")
    keys.set_defaults(handler=_cmd_keys)

    scopes = sub.add_parser("scopes", help="per-scope retrieval settings")
    scopes_sub = scopes.add_subparsers(dest="scopes_command", required=True)
    scopes_import = scopes_sub.add_parser(
        "import", help="import [butler.memory.retrieval] from a butler.toml"
    )
    scopes_import.add_argument("file")
    scopes_import.add_argument("--tenant", required=True)
    scopes_import.add_argument("--scope", default=None, help="default: [butler] name")
    scopes.set_defaults(handler=_cmd_scopes)

    index = sub.add_parser("index", help="upload markdown memory files (or --code source) from a folder")
    index.add_argument("directory")
    index.add_argument("--url", default="http://127.0.0.1:8080", help="recalld base URL")
    index.add_argument("--key", default=None, help="writer key (default: $RECALLD_API_KEY or the admin.key)")
    index.add_argument("--scope", default="global", help="scope of uploaded documents")
    index.add_argument("--code", action="store_true", help="index source code instead of markdown")
    index.add_argument("--repository", default=None, help="repository name for --code (default: folder name)")
    index.add_argument("--watch", action="store_true", help="keep running and re-upload changed files")
    index.set_defaults(handler=_cmd_index)

    evaluation = sub.add_parser(
        "eval", help="retrieval quality on a BEIR-format dataset (nDCG@10, recall, MRR)"
    )
    evaluation.add_argument("dataset", help="folder with corpus.jsonl, queries.jsonl, qrels/test.tsv")
    evaluation.add_argument("--modes", nargs="+", default=["keyword", "semantic", "hybrid"])
    evaluation.add_argument(
        "--fusion", choices=["rrf", "weighted"], default="rrf", help="fusion of the hybrid mode"
    )
    evaluation.add_argument("--limit-queries", type=int, default=0, help="only the first N queries")
    evaluation.add_argument(
        "--url",
        default=None,
        help="evaluate a running server instead (needs --key; its tenant keeps the data)",
    )
    evaluation.add_argument("--key", default=None, help="writer key for --url")
    evaluation.set_defaults(handler=_cmd_eval)

    bench_cmd = sub.add_parser("bench", help="latency and throughput against a running server")
    bench_cmd.add_argument("--url", default="http://127.0.0.1:8080")
    bench_cmd.add_argument("--key", default=None, help="writer key of the measured tenant")
    bench_cmd.add_argument(
        "--size", type=int, default=10_000, help="memories to load into the measured tenant"
    )
    bench_cmd.add_argument(
        "--noise-tenants",
        type=int,
        default=0,
        help="other tenants to create (in this machine's data directory or DATABASE_URL, "
        "which must be the server's) and fill",
    )
    bench_cmd.add_argument("--noise-size", type=int, default=0, help="memories spread over the other tenants")
    bench_cmd.add_argument("--skip-load", action="store_true", help="reuse what earlier runs loaded")
    bench_cmd.add_argument(
        "--modes", nargs="+", help="keyword semantic hybrid recall; code: hybrid multi-hop"
    )
    bench_cmd.add_argument("--concurrency", nargs="+", type=int, default=[1])
    bench_cmd.add_argument("--duration", type=float, default=15.0, help="seconds per mode and concurrency")
    bench_cmd.add_argument(
        "--warmup", type=float, default=20.0, help="seconds of unmeasured searches first (0: none)"
    )
    bench_cmd.add_argument("--scenario", default="S1", help="table label; 'code' times code search")
    bench_cmd.add_argument(
        "--seed",
        type=int,
        default=10,
        help="query seed; give each repeated run its own so the server's embedding cache starts cold",
    )
    bench_cmd.add_argument("--code-dirs", nargs="+", default=[], help="source folders for --scenario code")
    bench_cmd.set_defaults(handler=_cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `recalld` console script."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    settings = get_settings()
    try:
        code: int = args.handler(args, settings)
    except (CliError, StartupError) as exc:
        print(f"recalld: {exc}", file=sys.stderr)
        return 1
    except ApiError as exc:
        print(f"recalld: {exc.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
