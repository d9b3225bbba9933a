"""The FastAPI application: create_app and its lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from fastapi import FastAPI

from app.api import code, documents, export, health, memories, scopes, search
from app.api.mcp import mount_mcp
from app.api.openapi import install_openapi
from app.api.pages import install_pages
from app.embeddings.factory import build_embedder
from app.infra.config import Settings, get_settings
from app.infra.db import Database, acquire, create_pool
from app.infra.embedded_pg import pgdata_dir
from app.infra.supervisor import supervised
from app.rate_limit import RateLimiter
from app.rerank.factory import build_reranker
from app.services.embedding_switch_worker import SwitchWorker
from app.services.maintenance import maintain
from app.services.ranking import KEYWORD_RANKER
from app.startup import check_serving_role, owner_dsn, prepare_serving_database, settle_embedding_storage
from app.state import ServiceState
from app.web.body_limit import BodyLimitMiddleware
from app.web.http_errors import install_error_handlers
from app.web.middleware import RequestMiddleware

# Allocations between two young-generation collections (Python's default is 700).
GC_YOUNG_THRESHOLD = 10_000
log = logging.getLogger("recalld")

DESCRIPTION = """
recalld stores what agents learn — facts, rules, episodes, markdown memory files and source code —
and answers with what is relevant: hybrid BM25 + vector retrieval, fused, tenant-isolated.

Every `/v1` call needs `Authorization: Bearer <key>`. Roles: `reader` (search, recall, get),
`writer` (+ writes), `admin` (+ scope settings). Errors are always
`{"error": {"code", "message", "details"}}`.
"""


async def _start_upkeep(stack: AsyncExitStack, settings: Settings, state: ServiceState) -> None:
    """Run the background upkeep (vector indexes, statistics, a model switch) with the owner's login, when known."""
    owner = await owner_dsn(settings)
    if owner is None:
        log.warning(
            "no owner database URL (RECALLD_MIGRATION_DATABASE_URL): this service neither builds tenants' "
            "vector indexes nor refreshes statistics after large writes; semantic search scans vectors exactly "
            "until `recalld vectors index` builds them (`--every SECONDS` does both, as a process of its own)"
        )
        return
    tasks = [
        asyncio.create_task(
            maintain(
                owner,
                min_rows=settings.exact_scan_max_rows,
                sweep_interval=settings.vector_index_check_seconds,
                statistics_interval=settings.statistics_check_seconds,
                cache=state.vector_indexes,
            )
        ),
        # An embedding model switch (recalld embeddings switch) runs here, and resumes after a restart.
        asyncio.create_task(SwitchWorker(owner, state).run_forever()),
    ]

    async def stop() -> None:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    stack.push_async_callback(stop)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app; nothing connects until the lifespan runs."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        dsn, revision = await prepare_serving_database(settings)
        # Before any model loads: a configuration that does not match the stored vectors stops here.
        identity = await settle_embedding_storage(settings, dsn)
        embedder = await asyncio.to_thread(build_embedder, settings, identity)
        reranker = await asyncio.to_thread(build_reranker, settings)
        async with AsyncExitStack() as stack:
            if embedder is not None:
                stack.callback(embedder.close)
            if reranker is not None:
                stack.push_async_callback(reranker.close)
            pool = await create_pool(dsn, settings)
            stack.push_async_callback(pool.close)
            check_pool = await create_pool(dsn, settings, size=1)
            stack.push_async_callback(check_pool.close)
            async with acquire(pool, settings.pool_acquire_timeout) as conn:
                await check_serving_role(conn)
            supervisor = None
            if settings.database_url is None:
                pgdata = pgdata_dir(settings.resolved_data_dir)
                supervisor = await stack.enter_async_context(supervised(pgdata))
            log.info(
                "recalld ready: schema %s, keyword ranker %s, embedder %s, reranker %s",
                revision,
                KEYWORD_RANKER,
                f"{embedder.identity.model} ({embedder.runtime})" if embedder else "none (keyword-only)",
                reranker.name if reranker else "none",
            )
            app.state.service = ServiceState(
                settings=settings,
                pool=pool,
                embedder=embedder,
                schema_revision=revision,
                db=Database(pool, settings.pool_acquire_timeout),
                check_pool=check_pool,
                reranker=reranker,
                rate_limiter=RateLimiter(
                    per_second=settings.rate_limit_per_second, burst=settings.rate_limit_burst
                )
                if settings.rate_limit_per_second > 0
                else None,
                supervisor=supervisor,
            )
            await _start_upkeep(stack, settings, app.state.service)
            # What exists now lives as long as the process (the models, torch's and FastAPI's
            # modules, the pool): the cyclic collector's full passes walked all of it again and
            # again, about 9 % of the server's CPU at S2. Frozen, they walk only request garbage.
            gc.freeze()
            # A search allocates thousands of containers that reference counting frees anyway;
            # a young collection every 700 of them (the default) still cost ~3 % of the CPU.
            gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
            async with mcp_sessions.run():
                yield

    app = FastAPI(
        title="recalld",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        # /docs and /redoc come from install_pages, with their assets served locally.
        docs_url=None,
        redoc_url=None,
    )
    install_error_handlers(app)

    # Added first, so it runs inside RequestMiddleware: refused bodies still show in the metrics.
    app.add_middleware(
        BodyLimitMiddleware,
        default_limit=settings.max_body_bytes,
        upload_limit=settings.max_upload_body_bytes,
    )
    app.add_middleware(RequestMiddleware)

    app.include_router(health.router)
    app.include_router(memories.router)
    app.include_router(search.router)
    app.include_router(scopes.router)
    app.include_router(documents.router)
    app.include_router(code.router)
    app.include_router(export.router)
    mcp_sessions = mount_mcp(app, settings)
    install_openapi(app)
    install_pages(app)
    return app
