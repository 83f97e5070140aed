"""Each ``/mcp`` request on its way to the SDK, with the session ledger kept in step.

:func:`serve_counted` refuses a session-opening request the caps do not allow
(:mod:`memstrata.mcp.sessions`), makes room for one on a full server, and follows every
answer as the SDK sends it. The ledger changes before the client can act on the answer:
at its start (a session id handed out, a DELETE answered, a 404 for a forgotten session)
and at its last chunk, when the request stops counting as in flight. The SDK's ASGI call
returns a moment after that last chunk; were the request counted until then, a client
that sends its next ``initialize`` as soon as it has an answer would find that session
still busy (on a full server: a 503 although every session is idle between requests).
However a request ends (answered, raised, its client gone), it is counted out once.

A session whose ``initialize`` the SDK answered with a JSON-RPC error inside a 200 (bad
params; :mod:`memstrata.mcp.init_answers`) opened nothing the client can use, though the
SDK keeps it: the ledger forgets it at the answer's last chunk, and the gate ends it in
the SDK (:func:`memstrata.mcp.owners.end_as_owner`) before passing that chunk on, so a
client retrying a bad ``initialize`` never fills its user's cap, and the failed session's
id answers 404 once its answer has ended.
"""

from __future__ import annotations

import logging

import anyio
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memstrata.api.errors import error_response
from memstrata.logs import log_event
from memstrata.mcp.init_answers import AnswerReader, is_last_chunk
from memstrata.mcp.owners import end_as_owner
from memstrata.mcp.sessions import SessionLedger, opens_session, server_full, too_many

logger = logging.getLogger(__name__)


async def serve_counted(
    ledger: SessionLedger, app: ASGIApp, user_id: str, scope: Scope, receive: Receive, send: Send
) -> None:
    """Pass one authenticated ``/mcp`` request to the SDK (``app``), keeping ``ledger``
    in step with the session it opens, uses or ends; 429 when it would open one too many,
    503 when the server is full and no session is idle."""
    headers = Headers(scope=scope)
    session_id = headers.get(MCP_SESSION_ID_HEADER)
    if session_id is not None:
        await _serve_in_session(ledger, app, user_id, session_id, scope, receive, send)
        return
    reserved = opens_session(headers)
    refusal = None
    evicted = None
    if reserved and not ledger.reserve(user_id):
        refusal = too_many(ledger, user_id, scope)
    elif reserved:
        try:
            evicted = ledger.make_room()
        except LookupError:
            ledger.release(user_id)
            refusal = server_full(ledger)
    if refusal is not None:
        response = error_response(refusal)
        assert response is not None  # an ApiError always maps
        await response(scope, receive, send)
        return
    opening = _Opening(ledger, user_id, reserved, send)
    completed = False
    try:
        if evicted is not None:
            log_event(logger, "mcp.session.evicted", user_id=evicted.user_id, for_user=user_id)
            # Ended before the new session opens, so the process never holds more than
            # its cap; the client's next request for it gets 404 and it initializes again.
            await end_as_owner(app, evicted.session_id, evicted.user_id, scope)
        await app(scope, receive, opening.send)
        completed = True
    finally:
        opening.settle(completed)
        if opening.withheld is not None:
            # Shielded: the failed session is ended, and its client gets the end of the
            # answer, even when this request is being cancelled.
            with anyio.CancelScope(shield=True):
                await opening.end_failed(app, scope, ended_by_sdk=not completed)


class _Opening:
    """A session-opening request's answer on its way to the client (:meth:`send`), and
    the ledger kept in step with it."""

    def __init__(self, ledger: SessionLedger, user_id: str, reserved: bool, send: Send) -> None:
        self.ledger = ledger
        self.user_id = user_id
        self.reserved = reserved
        self.unsettled = reserved  # a slot taken and not yet given a session or back
        self.session_id: str | None = None  # the session the answer hands out
        self.answered = False  # its last chunk has come: idle, or (failed) forgotten
        self.reader: AnswerReader | None = None
        self.withheld: Message | None = None  # a failed initialize's last chunk
        self._send = send

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self._started(message)
        elif self.reader is not None and message["type"] == "http.response.body":
            self.reader.feed(message)
            if is_last_chunk(message) and self._answer_ended():
                self.withheld = message  # passed on once the session has ended
                return
        await self._send(message)

    def _started(self, start: Message) -> None:
        if start["status"] < 400:
            self.session_id = Headers(raw=start.get("headers", [])).get(MCP_SESSION_ID_HEADER)
        if self.session_id is not None:
            self.ledger.opened(self.user_id, self.session_id, reserved=self.reserved)
            self.reader = AnswerReader(start)
        elif self.unsettled:
            self.ledger.release(self.user_id)
        self.unsettled = False

    def _answer_ended(self) -> bool:
        """The request is over for the ledger; True when the answer is a JSON-RPC error
        (the session is forgotten, for :meth:`end_failed` to end)."""
        assert self.reader is not None and self.session_id is not None
        self.answered = True
        error = self.reader.error()
        self.ledger.finish(self.session_id, ended=error is not None)
        if error is not None:
            log_event(
                logger,
                "mcp.session.initialize_failed",
                user_id=self.user_id,
                code=error.get("code"),
            )
        return error is not None

    def settle(self, completed: bool) -> None:
        """After the SDK's call (``completed``: it returned; otherwise it raised)."""
        if self.session_id is None:
            if self.unsettled:
                self.ledger.release(self.user_id)
        elif not self.answered:
            # The SDK keeps a session only if its opening request answered below 400
            # without raising (cancelled, client gone); otherwise it discards it at once.
            self.ledger.finish(self.session_id, ended=not completed)
        elif not completed:
            self.ledger.end(self.session_id)  # answered, then raised: discarded all the same
        self.unsettled = False
        self.answered = True

    async def end_failed(self, app: ASGIApp, scope: Scope, *, ended_by_sdk: bool) -> None:
        """End the session a failed ``initialize`` opened (unless the SDK discarded it
        already), then pass on the answer's last chunk."""
        assert self.session_id is not None and self.withheld is not None
        if not ended_by_sdk:
            await end_as_owner(app, self.session_id, self.user_id, scope)
        await self._send(self.withheld)


async def _serve_in_session(
    ledger: SessionLedger,
    app: ASGIApp,
    user_id: str,
    session_id: str,
    scope: Scope,
    receive: Receive,
    send: Send,
) -> None:
    if not ledger.begin(user_id, session_id):
        await app(scope, receive, send)
        return
    counted = True  # this request is still in the ledger's in-flight count

    async def watch(message: Message) -> None:
        nonlocal counted
        if counted and message["type"] == "http.response.start":
            status = message["status"]
            # 404: the SDK has forgotten the session (ended, expired, crashed).
            if status == 404 or (scope.get("method") == "DELETE" and status < 300):
                ledger.finish(session_id, ended=True)
                counted = False
        elif counted and is_last_chunk(message):
            ledger.finish(session_id, ended=False)  # before the client has the whole answer
            counted = False
        await send(message)

    try:
        await app(scope, receive, watch)
    finally:
        if counted:
            ledger.finish(session_id, ended=False)
