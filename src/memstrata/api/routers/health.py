"""Probes and metrics. No authentication: they reveal no user data.

``/healthz``: the process answers. ``/readyz`` and ``/metrics``: what
:mod:`memstrata.api.probes` computes, one run at a time however many requests arrive.
"""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST

from memstrata.api.routing import Context
from memstrata.api.schemas import Health, Readiness


def build_router(route_class: type[APIRoute]) -> APIRouter:
    router = APIRouter(tags=["operations"], route_class=route_class)

    @router.get("/healthz")
    async def healthz() -> Health:
        """Liveness: the process is up."""
        return Health()

    @router.get("/readyz", responses={200: {"model": Readiness}, 503: {"model": Readiness}})
    async def readyz(context: Context) -> JSONResponse:
        """Readiness: the database takes new connections and has the pgvector extension."""
        status, body = await context.probes.readiness.get()
        return JSONResponse(body, status_code=status)

    # The content type the scrape sends (``ApiMetrics.scrape``), stated for the document:
    # a ``Response`` route has none of its own.
    text = {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}

    @router.get("/metrics", response_class=Response, responses={200: {"content": text}})
    async def metrics(context: Context) -> Response:
        """Prometheus metrics in the text exposition format."""
        body, content_type = await context.probes.scrape.get()
        return Response(body, media_type=content_type)

    return router
