"""A request cut off by the server's shutdown gets a JSON 503, not uvicorn's plain 500.

On SIGTERM uvicorn stops accepting connections and waits up to ``shutdown_grace_s``
(``MEMSTRATA_SHUTDOWN_GRACE_S``) for the requests in flight; then it cancels their tasks,
and a request whose response had not started would get uvicorn's plain-text "Internal
Server Error". This middleware catches that cancellation and answers 503 in the one error
shape (code ``shutting_down``), with ``Retry-After``: the client should send the request
again, and the load balancer hands it to another replica.

A sync route (``def``, such as ``turns:batch``) runs on a worker thread, which the cancel
does not stop: it runs on after the 503, and the process exits only once it has ended.
Its writes are one transaction (``Indexer.index_rounds`` embeds first, outside any
transaction, then stores every row in one), so the request's data is stored entirely or
not at all. A cut-off import is usually still embedding: ``serve`` closes the embedding
client right after the grace, so the thread's embedding call fails when the API answers
(or its timeout passes) and nothing is stored; one already past its embedding commits.
Re-posting the same turns is idempotent, so the retry the 503 asks for is safe either way.

uvicorn cancels a request's task for no other reason, so any cancellation seen here is
taken for the shutdown's.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memstrata.api.errors import HttpError, error_body
from memstrata.logs import log_event

logger = logging.getLogger(__name__)

# Another replica can take the request at once; one second lets the load balancer notice
# that this one has stopped accepting connections.
RETRY_AFTER_S = 1
SHUTTING_DOWN = "the server is shutting down; retry the request (another replica will answer)"


def cut_off_response() -> HttpError:
    """The 503 a request cut off by the shutdown gets."""
    return HttpError(
        503,
        error_body(503, SHUTTING_DOWN, code="shutting_down"),
        {"Retry-After": str(RETRY_AFTER_S), "Connection": "close"},
    )


class ShutdownCutoffMiddleware:
    """Answer a request whose task is cancelled before its response started with a 503."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch_start(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watch_start)
        except asyncio.CancelledError:
            if started:  # half a response cannot be replaced: uvicorn closes the connection
                raise
            state = scope.get("state")
            log_event(
                logger,
                "http.cut_off_by_shutdown",
                logging.WARNING,
                method=scope["method"],
                path=scope["path"],
                user_id=state.get("user_id") if isinstance(state, dict) else None,
            )
            # The cancelled task is this request's own and ends right after the answer,
            # which is what the cancel asked for; nothing else waits on it.
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            await cut_off_response().response()(scope, receive, send)
