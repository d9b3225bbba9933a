"""The `recalld` command: serve, migrate, tenants, keys, export, import, backup, restore, scopes, vectors, index, eval, bench."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from datetime import timedelta
from pathlib import Path

from app.cli.admin import (
    cmd_embeddings,
    cmd_keys,
    cmd_migrate,
    cmd_scopes,
    cmd_serve,
    cmd_tenants,
    cmd_vectors,
)
from app.cli.backup import cmd_backup, cmd_restore
from app.cli.common import CliError, duration, timestamp
from app.cli.runs import cmd_bench, cmd_eval, cmd_index
from app.cli.transfer import cmd_export, cmd_import
from app.errors import ApiError
from app.infra.config import get_settings
from app.startup import StartupError


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _expiry_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--expires-in", type=duration, default=None, help="e.g. 90d, 24h (default: never)")
    group.add_argument(
        "--expires-at", type=timestamp, default=None, help="ISO 8601 time (UTC unless it says)"
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="recalld", description="Memory and context retrieval for AI agents."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="start the HTTP service (embedded PostgreSQL unless DATABASE_URL)")
    serve.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (default 8080)")
    serve.set_defaults(handler=cmd_serve)

    migrate = sub.add_parser("migrate", help="upgrade the database schema to head")
    migrate.set_defaults(handler=cmd_migrate)

    tenants = sub.add_parser("tenants", help="manage tenants")
    tenants_sub = tenants.add_subparsers(dest="tenants_command", required=True)
    tenants_create = tenants_sub.add_parser("create", help="create a tenant; prints its id")
    tenants_create.add_argument("name")
    tenants_sub.add_parser("list", help="list tenants: name, id, created, memories, bytes, live keys")
    tenants_delete = tenants_sub.add_parser(
        "delete", help="delete a tenant with every memory, document, code file, quota counter and key"
    )
    tenants_delete.add_argument("name")
    tenants_delete.add_argument("--yes", action="store_true", help="really delete (there is no undo)")
    tenants.set_defaults(handler=cmd_tenants)

    keys = sub.add_parser("keys", help="manage API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    keys_create = keys_sub.add_parser("create", help="create a key; prints only the key")
    keys_create.add_argument("--tenant", required=True)
    keys_create.add_argument("--role", required=True, choices=["reader", "writer", "admin"])
    keys_create.add_argument("--operator", action="store_true", help="may search across tenants when asked")
    _expiry_arguments(keys_create)
    keys_list = keys_sub.add_parser(
        "list", help="list keys: tenant, prefix, role, created, last used, expiry, status"
    )
    keys_list.add_argument("--tenant", default=None, help="only this tenant's keys")
    keys_rotate = keys_sub.add_parser(
        "rotate", help="replace a key by a new one (printed once); the old one works for --grace more"
    )
    keys_rotate.add_argument("key", help="the whole key, or its prefix (rk_xxxxxxxx)")
    keys_rotate.add_argument("--tenant", default=None, help="the key's tenant, when a prefix is ambiguous")
    keys_rotate.add_argument(
        "--grace",
        type=duration,
        default=timedelta(hours=24),
        help="how long the old key stays valid (default 24h)",
    )
    _expiry_arguments(keys_rotate)
    keys_revoke = keys_sub.add_parser(
        "revoke", help="revoke a key: the whole key, or its prefix (rk_xxxxxxxx) with --tenant"
    )
    keys_revoke.add_argument("key", help="the whole key, or its prefix together with --tenant")
    keys_revoke.add_argument("--tenant", default=None, help="the key's tenant (needed for a prefix)")
    keys.set_defaults(handler=cmd_keys)

    export = sub.add_parser("export", help="write one tenant's memories, documents and code files as JSONL")
    export.add_argument("--tenant", required=True)
    export.add_argument("--output", "-o", default=None, help="file (.gz: gzip); default stdout")
    export.add_argument(
        "--with-embeddings", action="store_true", help="include the vectors (else import embeds again)"
    )
    export.set_defaults(handler=cmd_export)

    import_ = sub.add_parser(
        "import", help="load an export into a tenant (created if missing), all or nothing"
    )
    import_.add_argument("--tenant", required=True)
    import_.add_argument(
        "file", help="an export from `recalld export` or GET /v1/export (.gz too; - for stdin)"
    )
    import_.set_defaults(handler=cmd_import)

    backup_cmd = sub.add_parser(
        "backup", help="copy the embedded database, consistently, while it serves (pg_basebackup)"
    )
    backup_cmd.add_argument("directory", help="a new or empty directory")
    backup_cmd.set_defaults(handler=cmd_backup)

    restore_cmd = sub.add_parser(
        "restore", help="lay a backup into an empty data directory (RECALLD_DATA_DIR), then check it starts"
    )
    restore_cmd.add_argument("directory", help="a directory written by `recalld backup`")
    restore_cmd.set_defaults(handler=cmd_restore)

    scopes = sub.add_parser("scopes", help="per-scope retrieval settings")
    scopes_sub = scopes.add_subparsers(dest="scopes_command", required=True)
    scopes_import = scopes_sub.add_parser(
        "import", help="import [butler.memory.retrieval] from a butler.toml"
    )
    scopes_import.add_argument("file")
    scopes_import.add_argument("--tenant", required=True)
    scopes_import.add_argument("--scope", default=None, help="default: [butler] name")
    scopes.set_defaults(handler=cmd_scopes)

    vectors = sub.add_parser("vectors", help="per-tenant vector indexes")
    vectors_sub = vectors.add_subparsers(dest="vectors_command", required=True)
    vectors_index = vectors_sub.add_parser(
        "index",
        help="build each big enough tenant's HNSW index, drop invalid and orphaned ones (the owner's login; "
        "the service does this itself when it knows the owner's URL)",
    )
    vectors_index.add_argument(
        "--every",
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        help="keep running: sweep again every SECONDS, and refresh planner statistics after large writes, "
        "until stopped (default: sweep once)",
    )
    vectors.set_defaults(handler=cmd_vectors)

    embeddings = sub.add_parser("embeddings", help="the embedding model of the stored vectors")
    embeddings_sub = embeddings.add_subparsers(dest="embeddings_command", required=True)
    embeddings_sub.add_parser(
        "status",
        help="the recorded model, the embedding columns' type, how many memories have a vector, a switch's progress",
    )
    switch = embeddings_sub.add_parser(
        "switch",
        help="re-embed every memory with another model in the background while serving, then cut over at once",
    )
    switch.add_argument("--provider", required=True, choices=["local", "openai"])
    switch.add_argument("--model", default=None, help="the model's name (openai: as the endpoint serves it)")
    switch.add_argument(
        "--dim", type=int, default=None, help="the model's dimension (unset: asked of the endpoint)"
    )
    switch.add_argument(
        "--base-url", default=None, help="openai: the endpoint (default: RECALLD_OPENAI_BASE_URL)"
    )
    switch.add_argument(
        "--api-key-file",
        type=Path,
        default=None,
        help="openai: a file holding the endpoint's key (default: the serving process's RECALLD_OPENAI_API_KEY)",
    )
    embeddings_sub.add_parser("abort", help="stop a running switch; the stored vectors stay as they were")
    embeddings.set_defaults(handler=cmd_embeddings)

    index = sub.add_parser("index", help="upload markdown memory files (or --code source) from a folder")
    index.add_argument("directory")
    index.add_argument("--url", default="http://127.0.0.1:8080", help="recalld base URL")
    index.add_argument("--key", default=None, help="writer key (default: $RECALLD_API_KEY or the admin.key)")
    index.add_argument("--scope", default="global", help="scope of uploaded documents")
    index.add_argument("--code", action="store_true", help="index source code instead of markdown")
    index.add_argument("--repository", default=None, help="repository name for --code (default: folder name)")
    index.add_argument("--watch", action="store_true", help="keep running and re-upload changed files")
    index.set_defaults(handler=cmd_index)

    evaluation = sub.add_parser(
        "eval",
        help="retrieval quality on BEIR folders and LoCoMo conversation files (nDCG@10, evidence recall)",
    )
    evaluation.add_argument(
        "datasets",
        nargs="+",
        help="BEIR folders (corpus.jsonl, queries.jsonl, qrels/test.tsv) or LoCoMo .json files/folders",
    )
    evaluation.add_argument(
        "--runs",
        "--modes",
        nargs="+",
        default=None,
        help="(--modes: the same) keyword, semantic, hybrid (the service's default fusion) or hybrid:<fusion> "
        "(default: keyword semantic hybrid:rrf hybrid:weighted hybrid)",
    )
    evaluation.add_argument("--limit", type=int, default=10, help="results per search (default 10)")
    evaluation.add_argument(
        "--limit-queries", type=int, default=0, help="only the first N queries of each set"
    )
    evaluation.add_argument(
        "--reuse",
        action="store_true",
        help="keep each set's tenant in RECALLD_DATA_DIR and reuse it next time (no reload)",
    )
    evaluation.add_argument(
        "--dump-legs",
        default=None,
        metavar="DIR",
        help="also write each query's keyword and semantic top-100 (ids, raw scores, the query terms' idf) "
        "to DIR/<set>.jsonl (with --abstention, the negatives' to DIR/negatives.jsonl)",
    )
    evaluation.add_argument(
        "--locomo-format",
        choices=("episodes", "transcript", "both"),
        default="episodes",
        help="how conversation turns are stored: episodes ('speaker: text', a second apart), transcript "
        "('Speaker (1:56 pm on 8 May, 2023): text', every turn at its session's date, in batches), or both",
    )
    evaluation.add_argument(
        "--short-queries",
        action="store_true",
        help="also ask each set's queries cut to their first four content words (entity-style names and "
        "topics) of the same memories, as the set '<set>-short'",
    )
    evaluation.add_argument(
        "--abstention",
        action="store_true",
        help="also ask negatives (each set's queries in another set's tenant; a conversation's questions "
        "naming its people in another conversation) and report what default settings answer",
    )
    evaluation.add_argument(
        "--url",
        default=None,
        help="evaluate a running server instead (one set; needs --key; its tenant keeps the data)",
    )
    evaluation.add_argument("--key", default=None, help="writer key for --url")
    evaluation.set_defaults(handler=cmd_eval)

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
    bench_cmd.add_argument(
        "--scenario",
        default="S1",
        help="table label; 'code' times code search, 'scale' grows one tenant, "
        "'noisy' no-match keyword queries from another tenant, 'neighbours' one tenant on a "
        "crowded server (--url) against the same tenant alone (--baseline-url)",
    )
    bench_cmd.add_argument(
        "--baseline-url",
        default=None,
        help="--scenario neighbours: the server holding only the measured tenant",
    )
    bench_cmd.add_argument("--baseline-key", default=None, help="--scenario neighbours: writer key there")
    bench_cmd.add_argument(
        "--rounds", type=int, default=3, help="--scenario neighbours: alternating rounds per server"
    )
    bench_cmd.add_argument(
        "--sizes",
        nargs="+",
        type=int,
        default=[10_000, 100_000, 1_000_000],
        help="--scenario scale: tenant sizes to grow through",
    )
    bench_cmd.add_argument(
        "--stability-mode",
        choices=["keyword", "semantic", "hybrid"],
        default="keyword",
        help="--scenario scale: the mode timed right after each load and a minute later",
    )
    bench_cmd.add_argument(
        "--seed",
        type=int,
        default=10,
        help="query seed; give each repeated run its own so the server's embedding cache starts cold",
    )
    bench_cmd.add_argument("--code-dirs", nargs="+", default=[], help="source folders for --scenario code")
    bench_cmd.set_defaults(handler=cmd_bench)
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
