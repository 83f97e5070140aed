"""``/mcp`` requests in flight through a server shutdown, and their ids.

The SDK answers a request over streamable HTTP on an event stream (sse-starlette's
``EventSourceResponse``), and that library ends every event stream the moment uvicorn
gets SIGTERM/SIGINT. With sessions (the SDK clients' legacy mode) the tool call runs in the
session's task, not the request's: its stream closed at once (a 200 with an empty body; the
SDK client: "SSE stream ended without a response"), the request left uvicorn's count of
requests in flight, and the call ran on and wrote with nobody told. So
:class:`InFlightStreams` turns that library's automatic drain off and does it itself:

- a stream answering a request (POST) is a request in flight like any other: the shutdown
  waits for its answer up to ``MEMSTRATA_SHUTDOWN_GRACE_S``;
- one still unanswered when the grace ends is cancelled by uvicorn; its 200 and event
  stream have started, so the 503 ``shutting_down`` other requests get can no longer be
  sent: it gets the same refusal as its last event, a JSON-RPC error for its id (message
  :data:`~memstrata.api.shutdown.SHUTTING_DOWN`, ``data.code`` ``shutting_down``), which
  MCP clients raise as the call's error; the call itself may still land (the retry is
  safe: ``conversation_index_turn`` is idempotent, memory writes carry their version);
- a session's standalone GET stream answers no request: it ends at the signal, so it does
  not hold the shutdown up for the whole grace.

uvicorn tells the application nothing before its grace has passed, so the start of the
shutdown is read where sse-starlette read it: the ``should_exit`` flag of the server whose
``handle_exit`` is the SIGTERM handler (:func:`server_stopping`).

Requests of a session also hold their JSON-RPC ids here (:mod:`memstrata.mcp.duplicate_ids`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal

import anyio
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp_types import INTERNAL_ERROR, RequestId
from sse_starlette.sse import AppStatus
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memstrata.api.errors import error_response
from memstrata.api.middleware import route_template
from memstrata.api.shutdown import RETRY_AFTER_S, SHUTTING_DOWN, cut_off_response
from memstrata.logs import log_event
from memstrata.mcp.duplicate_ids import Held, RequestIds, duplicate_id, request_id_of
from memstrata.mcp.init_answers import is_last_chunk

logger = logging.getLogger(__name__)

# How often the start of a shutdown is looked for; a GET stream ends at most this late.
STOP_POLL_S = 0.1


def server_stopping() -> bool:
    """Whether the uvicorn server of this process has been asked to stop."""
    handler = signal.getsignal(signal.SIGTERM)
    return bool(getattr(getattr(handler, "__self__", None), "should_exit", False))


class InFlightStreams:
    """Wraps each authenticated ``/mcp`` request on its way to the SDK (:meth:`serve`)."""

    def __init__(self) -> None:
        # Streams end when this class says so (module doc); process-wide, and this class
        # serves every event stream of the process (the MCP transport's only).
        AppStatus.disable_automatic_graceful_drain()  # type: ignore[no-untyped-call]
        self.ids = RequestIds()
        self._stopping: asyncio.Event | None = None
        self._watcher: asyncio.Task[None] | None = None

    def stopping(self) -> asyncio.Event:
        """Set once the server is shutting down (a watcher polls, started on first use)."""
        if self._stopping is None:
            self._stopping = asyncio.Event()
            self._watcher = asyncio.get_running_loop().create_task(self._watch(self._stopping))
        return self._stopping

    @staticmethod
    async def _watch(stopping: asyncio.Event) -> None:
        while not server_stopping():
            await asyncio.sleep(STOP_POLL_S)
        stopping.set()

    async def serve(
        self, app: ASGIApp, user_id: str, body: bytes, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Pass the request to ``app`` (the SDK), with its id held in its session and its
        event stream ended as the module doc says."""
        method = scope["method"]
        if method == "GET":
            await self._standalone(app, scope, receive, send)
            return
        request_id = request_id_of(body) if method == "POST" else None
        if request_id is None:
            await app(scope, receive, send)
            return
        session_id = Headers(scope=scope).get(MCP_SESSION_ID_HEADER)
        held = None
        if session_id is not None:
            held = await self.ids.take(user_id, session_id, request_id)
            if held is None:
                response = error_response(duplicate_id(request_id))
                assert response is not None  # an ApiError always maps
                await response(scope, receive, send)
                return
        stream = _Stream(send, held)
        try:
            await app(scope, receive, stream.send)
        except asyncio.CancelledError:
            if not stream.open_events():
                raise  # not started: ShutdownCutoffMiddleware's 503; or already answered
            await stream.refuse(request_id, scope, user_id)
            task = asyncio.current_task()
            if task is not None:  # uvicorn's cancel asked for this request to end: it has
                task.uncancel()
        finally:
            if held is not None:
                self.ids.give_back(held)

    async def _standalone(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        """A GET stream, ended (with a proper end of its body) when the shutdown starts."""
        stopping = self.stopping()
        stream = _Stream(send)
        async with anyio.create_task_group() as group:

            async def end_on_stop() -> None:
                await stopping.wait()
                group.cancel_scope.cancel()

            group.start_soon(end_on_stop)
            await app(scope, receive, stream.send)
            group.cancel_scope.cancel()
        if stream.open_events():
            await stream.end()
        elif not stream.started:  # came in as the shutdown began: never opened
            await cut_off_response().response()(scope, receive, send)


class _Stream:
    """A response on its way to the client: whether it is an event stream still open."""

    def __init__(self, send: Send, held: Held | None = None) -> None:
        self._send = send
        self.held = held  # the request's id, free for reuse once the answer has ended
        self.started = False
        self.events = False  # the response is an event stream
        self.ended = False

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            content_type = Headers(raw=message.get("headers", [])).get("content-type", "")
            self.events = content_type.startswith("text/event-stream")
        elif is_last_chunk(message):
            self.ended = True
            if self.held is not None:
                self.held.answered = True
        await self._send(message)

    def open_events(self) -> bool:
        return self.events and not self.ended

    async def end(self) -> None:
        self.ended = True
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    async def refuse(self, request_id: RequestId, scope: Scope, user_id: str) -> None:
        """End the stream with the shutdown's refusal as the answer to ``request_id``."""
        log_event(
            logger,
            "http.cut_off_by_shutdown",
            logging.WARNING,
            method=scope["method"],
            path=scope["path"],
            route=route_template(scope),
            user_id=user_id,
            answer="JSON-RPC error on the started event stream",
        )
        error = {
            "code": INTERNAL_ERROR,
            "message": SHUTTING_DOWN,
            "data": {"code": "shutting_down", "retry_after_s": RETRY_AFTER_S},
        }
        answer = {"jsonrpc": "2.0", "id": request_id, "error": error}
        event = f"event: message\r\ndata: {json.dumps(answer)}\r\n\r\n".encode()
        try:
            await self._send({"type": "http.response.body", "body": event, "more_body": True})
            await self.end()
        except OSError:
            pass  # the client has gone: nobody to tell
