"""Retrieval over HTTP: search a user's memory, index a conversation turn.

Both are thin wrappers over the library calls (``mem.search.search`` and
``mem.indexer.index_turn``); the response bodies are those calls' ``to_dict()``, typed
by ``api.schemas`` so /openapi.json describes them.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.routing import APIRoute

from memstrata.api.routing import Context, CurrentUser
from memstrata.api.schemas import (
    ErrorBody,
    IndexReportBody,
    SearchRequest,
    SearchResults,
    TurnRequest,
)

_ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorBody} for code in (400, 401, 413, 422)
}


def build_router(route_class: type[APIRoute]) -> APIRouter:
    router = APIRouter(prefix="/api/memory", tags=["memory"], route_class=route_class)

    @router.post("/search", responses=_ERRORS)
    def search(body: SearchRequest, user_id: CurrentUser, context: Context) -> SearchResults:
        """Hybrid search (BM25 + vectors, RRF, time decay) over this user's memory only.

        ``mode`` is ``bm25`` when no embedding API is configured or the query's embedding
        failed (``warnings`` says why). ``explain`` gives each hit's per-stage ranks.
        """
        result = context.mem.search.search(
            user_id, body.query, top_k=body.top_k, sources=body.sources
        )
        context.metrics.record_search(result.mode, len(result.hits))
        return SearchResults.model_validate(result.to_dict())

    @router.post("/conversations/{session_id}/turns", responses=_ERRORS)
    def index_turn(
        session_id: Annotated[str, Path(min_length=1, max_length=200)],
        body: TurnRequest,
        user_id: CurrentUser,
        context: Context,
    ) -> IndexReportBody:
        """Index one conversation round (user message + assistant reply) for search.

        Idempotent: re-posting the same ``turn_index`` with the same text changes nothing;
        with new text it replaces that turn's rows.
        """
        report = context.mem.indexer.index_turn(
            user_id,
            session_id,
            body.turn_index,
            body.user_message,
            body.assistant_reply,
            timestamp=body.timestamp,
        )
        context.metrics.record_turn_indexed(report.inserted)
        return IndexReportBody.model_validate(report.to_dict())

    return router
