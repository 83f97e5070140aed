"""Retrieval over HTTP: search a user's memory, index a conversation turn.

Both are thin wrappers over the library calls (``mem.search.search`` and
``mem.indexer.index_turn``); the response bodies are those calls' ``to_dict()``, typed
by ``api.memory_schemas`` so /openapi.json describes them.
"""

from __future__ import annotations

import threading
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request, Response
from fastapi.routing import APIRoute

from memstrata.api.errors import ApiError
from memstrata.api.hangups import client_gone, unless_gone
from memstrata.api.memory_schemas import (
    BATCH_REJECTED_RESPONSE,
    BatchTurn,
    BatchTurnsRequest,
    BatchTurnsResult,
    IndexReportBody,
    InvalidBatchTurn,
    SearchRequest,
    SearchResults,
    TurnRequest,
)
from memstrata.api.middleware import CLIENT_CLOSED_REQUEST
from memstrata.api.routing import (
    Context,
    CurrentUser,
    checked_before_body,
    register_anything_convertor,
)
from memstrata.api.schemas import error_responses
from memstrata.retrieval.embedding_provider import deadline_ends_when
from memstrata.retrieval.hangup import ClientGoneError, searched_for
from memstrata.retrieval.rounds import Round, RoundsInvalidError, validate_rounds
from memstrata.retrieval.session_ids import SESSION_ID_RULE, InvalidSessionIdError, check_session_id

_ERRORS = error_responses(400, 413, 422)


@checked_before_body
async def path_session_id(
    session_id: Annotated[str, Path(description=SESSION_ID_RULE)],
) -> str:
    """A session id from a URL path, or 400 saying which characters are allowed — before
    the body is read, so a bad id is a 400 whatever the body is."""
    try:
        return check_session_id(session_id)
    except InvalidSessionIdError as exc:
        raise ApiError(400, str(exc), code="invalid_session_id") from exc


def batch_rounds(turns: list[BatchTurn | InvalidBatchTurn]) -> list[Round]:
    """The rounds of a batch, or ``RoundsInvalidError`` listing every invalid turn: those
    that failed the schema and, among the others, those that fail the rounds' checks."""
    rounds = [
        (n, Round(t.session_id, t.turn_index, t.user_message, t.assistant_reply, t.timestamp))
        for n, t in enumerate(turns)
        if isinstance(t, BatchTurn)
    ]
    if len(rounds) == len(turns):
        return [r for _, r in rounds]  # import_rounds validates them
    errors = [
        {
            "index": n,
            "session_id": t.session_id,
            "turn_index": t.turn_index,
            "error": t.error,
            "field": t.field,
        }
        for n, t in enumerate(turns)
        if isinstance(t, InvalidBatchTurn)
    ]
    _, more = validate_rounds([r for _, r in rounds])
    errors += [{**e, "index": rounds[e["index"]][0]} for e in more]
    raise RoundsInvalidError(sorted(errors, key=lambda e: e["index"]), len(turns))


def build_router(route_class: type[APIRoute]) -> APIRouter:
    register_anything_convertor()
    router = APIRouter(prefix="/api/memory", tags=["memory"], route_class=route_class)

    @router.post("/search", response_model=SearchResults, responses=_ERRORS)
    async def search(
        body: SearchRequest, user_id: CurrentUser, context: Context, request: Request
    ) -> SearchResults | Response:
        """Hybrid search (BM25 + vectors, RRF, time decay) over this user's memory only.

        ``mode`` is ``bm25`` when no embedding API is configured or the query's embedding
        failed (``warnings`` says why). ``explain`` gives each hit's per-stage ranks. A
        client that hangs up gets no answer, and its query is not embedded (or its
        embedding is abandoned).
        """
        gone = threading.Event()

        def run() -> SearchResults | None:
            with searched_for(gone):
                try:
                    result = context.mem.search.search(
                        user_id,
                        body.query,
                        top_k=body.top_k,
                        sources=body.sources,
                        as_of=body.as_of,
                    )
                except ClientGoneError:
                    return None
            context.metrics.record_search(result.mode, len(result.hits))
            return SearchResults.of(result.to_dict(), marked=body.marks)

        # One hop to a worker thread for the whole search. As a plain ``def`` route it took
        # two: FastAPI runs a sync route's result validation on a worker thread as well.
        answer = await unless_gone(request, gone, run)
        # Nobody reads it; the request log and metrics say 499 (``middleware``).
        return Response(status_code=CLIENT_CLOSED_REQUEST) if answer is None else answer

    # Any characters at all (even "/" and newlines) reach us and get a clear 400, not 404.
    @router.post("/conversations/{session_id:anything}/turns", responses=_ERRORS)
    def index_turn(
        session_id: Annotated[str, Depends(path_session_id)],
        body: TurnRequest,
        user_id: CurrentUser,
        context: Context,
        gone: Annotated[threading.Event, Depends(client_gone, scope="function")],
    ) -> IndexReportBody:
        """Index one conversation round (user message + assistant reply) for search.

        Idempotent: re-posting the same ``turn_index`` with the same text changes nothing;
        with new text it replaces that turn's rows. A client that hangs up ends the
        embedding as the budget does: the turn is stored, without a vector if its request
        was not sent yet, for the worker.
        """
        with deadline_ends_when(gone):
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

    @router.post(
        "/conversations/turns:batch",
        response_model=BatchTurnsResult,
        responses={**_ERRORS, 422: BATCH_REJECTED_RESPONSE},
    )
    def index_turns_batch(
        body: BatchTurnsRequest,
        user_id: CurrentUser,
        context: Context,
        gone: Annotated[threading.Event, Depends(client_gone, scope="function")],
    ) -> BatchTurnsResult:
        """Index many conversation rounds (of one or several sessions) in one request.

        All or nothing: each turn is validated as by the single-turn endpoint; if any is
        invalid, nothing is stored and the 422 lists every invalid turn. Valid batches are
        written in one transaction with batched embedding calls. An embedding failure does
        not reject the batch: the text is stored without a vector (searchable by BM25)
        and is embedded later. With `"embed": "background"` no embedding call is made:
        the turns are stored (BM25 finds them at once) and the background worker embeds
        them (`deferred` counts them; `/readyz` shows them as `pending`); 400 where no
        worker runs. A client that hangs up ends the embedding as the budget does: every
        turn is stored, those not embedded yet without a vector, for the worker.
        """
        try:
            with deadline_ends_when(gone):
                reports = context.mem.import_rounds(
                    user_id, batch_rounds(body.turns), background=body.embed == "background"
                )
        except RoundsInvalidError as exc:
            raise ApiError(422, str(exc), extra={"errors": exc.errors}) from exc
        for report in reports:
            context.metrics.record_turn_indexed(report.inserted)
        return BatchTurnsResult(
            turns=len(reports),
            inserted=sum(r.inserted for r in reports),
            unchanged=sum(r.unchanged for r in reports),
            embedded=sum(r.embedded for r in reports),
            embedding_failed=sum(r.embedding_failed for r in reports),
            deferred=sum(r.deferred for r in reports),
            reports=[IndexReportBody.model_validate(r.to_dict()) for r in reports],
        )

    return router
