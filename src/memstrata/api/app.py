"""The FastAPI app factory, and the router a host platform mounts into its own app.

Standalone (``memstrata serve``, or ``uvicorn memstrata.api.app:create_app --factory``)::

    app = create_app(settings)            # the lifespan opens and closes the runtime

Inside a host platform that already owns a runtime::

    mem = Memstrata.open(settings)
    host_app.include_router(create_router(mem), prefix="/memory")

Nothing is created at import time.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi_offline import FastAPIOffline
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp

from memstrata import package_version
from memstrata.api.context import ApiContext
from memstrata.api.errors import ApiError, install_error_handlers
from memstrata.api.metrics import ApiMetrics
from memstrata.api.middleware import (
    DocsHeadersMiddleware,
    LocalCallerMiddleware,
    RequestLogMiddleware,
    ResponseHeadersMiddleware,
)
from memstrata.api.routers import config, conflicts, health, limits, memory
from memstrata.api.routing import route_class
from memstrata.api.schemas import with_method_not_allowed, without_default_422
from memstrata.api.shutdown import CutOffRoutes, ShutdownCutoffMiddleware, after_grace_s
from memstrata.config import Settings
from memstrata.db.migrate import schema_head
from memstrata.db.pool_watch import PoolStats, pool_stats
from memstrata.logs import log_event
from memstrata.retrieval.embedding_plan import ExpressCounts
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.state_reader import state_reader
from memstrata.runtime import Memstrata
from memstrata.service_logging import configure_service_logging
from memstrata.web import web_router

logger = logging.getLogger(__name__)


def create_router(
    memstrata: Memstrata | ApiContext, *, include_operations: bool = True
) -> APIRouter:
    """All memstrata routes, with authentication, body limit and error mapping built in.

    Pass a runtime (a context with its settings and fresh metrics is made for it) or an
    :class:`ApiContext`. ``include_operations=False`` leaves out ``/healthz``, ``/readyz``
    and ``/metrics`` for hosts that have their own.
    """
    context = ApiContext.of(memstrata)
    context.metrics.watch_database(lambda: _database_up(context))
    context.metrics.watch_count(
        "memstrata_embedding_bulk_waiting",
        "Passage (write and re-embedding) requests waiting for a slot on the embedding API; "
        "a write's own gives up after MEMSTRATA_EMBEDDING_BULK_WAIT_S.",
        lambda: _bulk_waiting(context),
    )
    context.metrics.watch_count(
        "memstrata_file_embeddings_deferred",
        "Passages of memory-file writes stored without a vector when the write's embedding "
        "budget ran out (MEMSTRATA_EMBEDDING_FILE_BUDGET_S), for the background worker.",
        lambda: _file_deferred(context),
        total=True,
    )
    context.metrics.watch_totals(
        "memstrata_turn_embeddings_deferred",
        "Passages of conversation turns stored without a vector when the write's embedding "
        "budget ran out (MEMSTRATA_EMBEDDING_FILE_BUDGET_S) or its client hung up, for the "
        "background worker; by route (write: batch or turn).",
        "write",
        lambda: _turns_deferred(context),
    )
    context.metrics.watch_circuits(lambda: _circuits(context))
    context.metrics.watch_express(lambda: _express(context))
    context.metrics.watch_pools(lambda: _pools(context))
    routes = route_class(context)
    router = APIRouter()
    router.include_router(config.build_router(routes))
    router.include_router(limits.build_router(routes))
    router.include_router(memory.build_router(routes))
    router.include_router(conflicts.build_router(routes))
    if include_operations:
        router.include_router(health.build_router(routes))
    return router


def create_app(settings: Settings | None = None, *, memstrata: Memstrata | None = None) -> FastAPI:
    """The standalone service. Without ``memstrata``, the lifespan opens one from settings;
    without either, the settings come from the environment and the service's logging is
    set up from them, as the CLI does (``uvicorn memstrata.api.app:create_app --factory``)."""
    if settings is None and memstrata is not None:
        settings = memstrata.settings
    elif settings is None:
        settings = Settings()
        configure_service_logging(settings)
    context = ApiContext(settings, metrics=ApiMetrics(), memstrata=memstrata)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if memstrata is not None:
            _log_started()
            memstrata.start_background()
            try:
                yield
            finally:
                await run_in_threadpool(memstrata.stop_background)
            return
        owned = await run_in_threadpool(Memstrata.open, settings)
        _log_started()
        context.attach(owned)
        owned.start_background()
        try:
            yield
        finally:
            # The server has cancelled what still ran: let the cut-off edits land first.
            await owned.drain(after_grace_s(settings))
            context.detach()
            await run_in_threadpool(owned.close)

    # /docs and /redoc load their JavaScript and CSS from the installed fastapi-offline
    # package, never from a CDN. Trailing-slash redirects get a relative Location (see
    # RequestLogMiddleware): starlette builds it from the Host header, which a client sets.
    # Like every other path they sit under the prefix, and so do the schema and the assets
    # the pages load (by absolute path).
    prefix = settings.api_prefix
    meta: dict[str, Any] = {
        "title": "memstrata",
        "summary": "Layered, per-user memory for AI agents.",
        "version": package_version(),
        "lifespan": lifespan,
        "openapi_url": f"{prefix}/openapi.json",
        "telemetry": {
            "tracing": settings.otel_telemetry,
            "metrics": settings.otel_telemetry,
            "logs": settings.otel_telemetry,
        },
    }
    if settings.api_docs:
        app = FastAPIOffline(
            docs_url=f"{prefix}/docs",
            redoc_url=f"{prefix}/redoc",
            swagger_ui_oauth2_redirect_url=f"{prefix}/docs/oauth2-redirect",
            static_url=f"{prefix}/static-offline-docs",
            **meta,
        )
    else:
        app = FastAPI(docs_url=None, redoc_url=None, **meta)
    app.state.context = context
    app.state.metrics = context.metrics
    fastapi_openapi = app.openapi
    app.openapi = lambda: with_method_not_allowed(  # type: ignore[method-assign]
        without_default_422(fastapi_openapi())
    )
    install_error_handlers(app)
    # Added first, so it sits inside the request log: a cut-off request is logged and
    # counted as the 503 it gets, with its X-Request-ID. `memstrata serve` names the
    # worker threads the cut-off requests leave running by their routes.
    app.state.cut_off = CutOffRoutes()
    app.add_middleware(ShutdownCutoffMiddleware, prefix=prefix, cut_off=app.state.cut_off)
    app.add_middleware(RequestLogMiddleware, metrics=context.metrics, prefix=prefix)
    if settings.api_docs:
        pages = frozenset({f"{prefix}/docs", f"{prefix}/redoc", f"{prefix}/docs/oauth2-redirect"})
        app.add_middleware(DocsHeadersMiddleware, paths=pages)
    app.add_middleware(LocalCallerMiddleware)  # for the development 401 hints
    # Around the whole stack, Starlette's outermost middleware included: a bug's 500,
    # which that one writes, is no more cached or sniffed than any other answer.
    build_stack = app.build_middleware_stack

    def stack_with_headers() -> ASGIApp:
        return ResponseHeadersMiddleware(build_stack(), prefix)

    app.build_middleware_stack = stack_with_headers  # type: ignore[method-assign]
    app.include_router(create_router(context), prefix=prefix)
    if settings.mcp_http_enabled:  # before any catch-all mount
        from memstrata.mcp.http import mount_mcp  # memstrata.mcp imports memstrata.api

        mount_mcp(app, context)
    if settings.web_ui:
        app.include_router(web_router(context), prefix=prefix)
    return app


def _log_started() -> None:
    """Which release serves, once its database is open: during a rolling upgrade the log
    tells the replicas of each release apart (``memstrata_build_info`` on /metrics too)."""
    log_event(
        logger,
        "server.started",
        version=package_version(),
        schema_head=schema_head(),
    )


def _http_embedder(context: ApiContext) -> OpenAICompatibleEmbedder | None:
    """The attached runtime's embedding API client; None before it is ready, once it is
    detached, or without an embedding API."""
    if not context.ready:
        return None
    try:
        embedder = context.mem.embedder
    except ApiError:  # detached meanwhile: stopping
        return None
    return embedder if isinstance(embedder, OpenAICompatibleEmbedder) else None


def _bulk_waiting(context: ApiContext) -> int | None:
    embedder = _http_embedder(context)
    return None if embedder is None else embedder.lanes.waiting


def _file_deferred(context: ApiContext) -> int | None:
    """Passages file writes left to the worker so far; None without an embedding API."""
    if _http_embedder(context) is None:
        return None
    try:
        return context.mem.indexer.file_budget.deferred
    except ApiError:  # detached meanwhile: stopping
        return None


def _turns_deferred(context: ApiContext) -> Mapping[str, int] | None:
    """Passages of turns writes left to the worker so far, by route; None without an
    embedding API."""
    if _http_embedder(context) is None:
        return None
    try:
        return context.mem.indexer.file_budget.rounds_deferred
    except ApiError:  # detached meanwhile: stopping
        return None


def _circuits(context: ApiContext) -> dict[str, bool] | None:
    """Whether the embedding client skips its passage and its query server now (one
    circuit for both when they are one server); None without an embedding API."""
    embedder = _http_embedder(context)
    if embedder is None:
        return None
    return {
        "passage": embedder.breaker.state != "closed",
        "query": embedder.query_breaker.state != "closed",
    }


def _express(context: ApiContext) -> ExpressCounts | None:
    """Passage requests sent to the query server, their tokens and the small writes deferred
    (0 while none can go there: one server for both, or the express slot off); None
    without an embedding API."""
    embedder = _http_embedder(context)
    return None if embedder is None else embedder.express_use.counts


def _pools(context: ApiContext) -> dict[str, PoolStats] | None:
    """The attached runtime's database pools: ``main`` (its sessions) and ``search_check``
    (the check before each search, on a pool of its own); None while none is attached."""
    if not context.ready:
        return None
    try:
        engine = context.mem.db.engine
    except ApiError:  # detached meanwhile: stopping
        return None
    found = {"main": pool_stats(engine), "search_check": pool_stats(state_reader(engine).engine)}
    return {name: stats for name, stats in found.items() if stats is not None}


def _database_up(context: ApiContext) -> bool | None:
    """The database monitor's view for ``memstrata_database_up``; None (no sample) while
    no runtime is attached or its monitor does not run."""
    if not context.ready:
        return None
    try:
        return context.mem.db.up()
    except ApiError:  # detached meanwhile: stopping
        return None
