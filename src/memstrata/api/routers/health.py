"""Probes and metrics. No authentication: they reveal no user data.

``/healthz``: the process answers. ``/readyz``: a NEW connection to the database answers
(a smart shutdown refuses new connections while old ones still work, so a pooled one
would not notice) and pgvector is installed — 503 otherwise, the reason logged, not
returned. While BM25 can answer it stays 200 and says how the vector side is:
``{"vectors": "degraded", "pending": 163}`` when rows wait for a vector or the embedding
circuit is open. ``/metrics``: Prometheus text (see :mod:`memstrata.api.metrics`);
aggregate counts only, labelled by route template.
"""

from __future__ import annotations

import logging
from typing import Literal

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from sqlalchemy.exc import SQLAlchemyError

from memstrata.api.context import ApiContext
from memstrata.api.routing import Context
from memstrata.api.schemas import Health, Readiness
from memstrata.db.engine import check_pgvector
from memstrata.errors import MemstrataError, PgvectorMissingError
from memstrata.logs import log_event

logger = logging.getLogger(__name__)


def build_router(route_class: type[APIRoute]) -> APIRouter:
    router = APIRouter(tags=["operations"], route_class=route_class)

    @router.get("/healthz")
    async def healthz() -> Health:
        """Liveness: the process is up."""
        return Health()

    @router.get("/readyz", responses={200: {"model": Readiness}, 503: {"model": Readiness}})
    def readyz(context: Context) -> JSONResponse:
        """Readiness: the database takes new connections and has the pgvector extension."""
        if not context.ready:
            return _unready("starting", "unknown")
        mem = context.mem
        error = mem.db.probe()
        if error is not None:
            log_event(logger, "health.not_ready", logging.WARNING, reason=error)
            return _unready("unreachable", "unknown")
        try:
            version = check_pgvector(mem.db.engine)
        except PgvectorMissingError as exc:
            log_event(logger, "health.not_ready", logging.WARNING, reason=str(exc))
            return _unready("ok", "missing")
        except (MemstrataError, SQLAlchemyError) as exc:
            log_event(logger, "health.not_ready", logging.WARNING, reason=str(exc))
            return _unready("unreachable", "unknown")
        vectors, pending = _vector_state(context)
        body = Readiness(
            status="ready", database="ok", pgvector=version, vectors=vectors, pending=pending
        )
        return JSONResponse(body.model_dump(), status_code=200)

    @router.get("/metrics", response_class=Response)
    def metrics(context: Context) -> Response:
        """Prometheus metrics in the text exposition format."""
        if context.ready:
            _vector_state(context)  # refreshes the backlog gauges
        body, content_type = context.metrics.render()
        return Response(body, media_type=content_type)

    return router


def _vector_state(context: ApiContext) -> tuple[Literal["ok", "degraded", "off"], int | None]:
    """The vector side for /readyz, updating the backlog gauges of /metrics."""
    healer = context.mem.healer
    if healer is None:
        return "off", None
    try:
        backlog = healer.backlog()
    except SQLAlchemyError:
        return "degraded", None
    circuit_open = healer.embedder.breaker.state != "closed"
    context.metrics.record_backlog(backlog.pending, backlog.oldest_age_s, backlog.failed)
    context.metrics.record_circuit(circuit_open)
    degraded = backlog.pending > 0 or circuit_open
    return ("degraded" if degraded else "ok"), backlog.pending


def _unready(database: str, pgvector: str) -> JSONResponse:
    return _readiness(503, "unavailable", database, pgvector)


def _readiness(code: int, status: str, database: str, pgvector: str) -> JSONResponse:
    body = Readiness(status=status, database=database, pgvector=pgvector)
    return JSONResponse(body.model_dump(), status_code=code)
