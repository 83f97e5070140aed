"""Retrieval over HTTP: search a user's memory, index a conversation turn.

Both are thin wrappers over the library calls (``mem.search.search`` and
``mem.indexer.index_turn``); the response bodies are those calls' ``to_dict()``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from fastapi.routing import APIRoute

from memstrata.api.errors import ApiError
from memstrata.api.routing import Context, CurrentUser
from memstrata.api.schemas import (
    BatchTurnsRejected,
    BatchTurnsRequest,
    BatchTurnsResult,
    ErrorBody,
    SearchRequest,
    TurnRequest,
)
from memstrata.retrieval.rounds import Round, RoundsInvalidError

_ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorBody} for code in (400, 401, 413, 422)
}


def build_router(route_class: type[APIRoute]) -> APIRouter:
    router = APIRouter(prefix="/api/memory", tags=["memory"], route_class=route_class)

    @router.post("/search", responses=_ERRORS)
    def search(body: SearchRequest, user_id: CurrentUser, context: Context) -> dict[str, Any]:
        """Hybrid search (BM25 + vectors, RRF, time decay) over this user's memory only.

        ``mode`` is ``bm25`` when no embedding API is configured or the query's embedding
        failed (``warnings`` says why). ``explain`` gives each hit's per-stage ranks.
        """
        result = context.mem.search.search(
            user_id, body.query, top_k=body.top_k, sources=body.sources, as_of=body.as_of
        )
        context.metrics.record_search(result.mode, len(result.hits))
        return result.to_dict()

    @router.post("/conversations/{session_id}/turns", responses=_ERRORS)
    def index_turn(
        session_id: Annotated[str, Path(min_length=1, max_length=200)],
        body: TurnRequest,
        user_id: CurrentUser,
        context: Context,
    ) -> dict[str, Any]:
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
        return report.to_dict()

    @router.post(
        "/conversations/turns:batch",
        response_model=BatchTurnsResult,
        responses={**_ERRORS, 422: {"model": BatchTurnsRejected}},
    )
    def index_turns_batch(
        body: BatchTurnsRequest, user_id: CurrentUser, context: Context
    ) -> dict[str, Any]:
        """Index many conversation rounds (of one or several sessions) in one request.

        All or nothing: each turn is validated as by the single-turn endpoint; if any is
        invalid, nothing is stored and the 422 lists every invalid turn. Valid batches are
        written in one transaction with batched embedding calls. An embedding failure does
        not reject the batch: the text is stored without a vector (searchable by BM25)
        and is embedded later.
        """
        rounds = [
            Round(t.session_id, t.turn_index, t.user_message, t.assistant_reply, t.timestamp)
            for t in body.turns
        ]
        try:
            reports = context.mem.indexer.index_rounds(user_id, rounds)
        except RoundsInvalidError as exc:
            raise ApiError(422, str(exc), extra={"errors": exc.errors}) from exc
        for report in reports:
            context.metrics.record_turn_indexed(report.inserted)
        return {
            "turns": len(reports),
            "inserted": sum(r.inserted for r in reports),
            "unchanged": sum(r.unchanged for r in reports),
            "embedded": sum(r.embedded for r in reports),
            "embedding_failed": sum(r.embedding_failed for r in reports),
            "reports": [r.to_dict() for r in reports],
        }

    return router
