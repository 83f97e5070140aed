"""Probes and metrics. No authentication: they reveal no user data.

``/healthz``: the process answers. ``/readyz``: the database answers and pgvector is
installed (503 otherwise; the reason is logged, not returned). ``/metrics``: Prometheus
text (see :mod:`memstrata.api.metrics`); aggregate counts only, labelled by route template.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from sqlalchemy.exc import SQLAlchemyError

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
        """Readiness: the database is reachable and has the pgvector extension."""
        if not context.ready:
            return _unready("starting", "unknown")
        try:
            version = check_pgvector(context.mem.db.engine)
        except PgvectorMissingError as exc:
            log_event(logger, "health.not_ready", logging.WARNING, reason=str(exc))
            return _unready("ok", "missing")
        except (MemstrataError, SQLAlchemyError) as exc:
            log_event(logger, "health.not_ready", logging.WARNING, reason=str(exc))
            return _unready("unreachable", "unknown")
        return _readiness(200, "ready", "ok", version)

    @router.get("/metrics", response_class=Response)
    def metrics(context: Context) -> Response:
        """Prometheus metrics in the text exposition format."""
        body, content_type = context.metrics.render()
        return Response(body, media_type=content_type)

    return router


def _unready(database: str, pgvector: str) -> JSONResponse:
    return _readiness(503, "unavailable", database, pgvector)


def _readiness(code: int, status: str, database: str, pgvector: str) -> JSONResponse:
    body = Readiness(status=status, database=database, pgvector=pgvector)
    return JSONResponse(body.model_dump(), status_code=code)
