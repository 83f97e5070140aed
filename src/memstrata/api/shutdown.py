"""A request cut off by the server's shutdown gets a JSON 503, not uvicorn's plain 500.

On SIGTERM uvicorn stops accepting connections and waits up to ``shutdown_grace_s``
(``MEMSTRATA_SHUTDOWN_GRACE_S``) for the requests in flight; then it cancels their tasks,
and a request whose response had not started would get uvicorn's plain-text "Internal
Server Error". This middleware catches that cancellation and answers 503 in the one error
shape (code ``shutting_down``), with ``Retry-After``: the client should send the request
again, and the load balancer hands it to another replica.

A cut-off request's work may outlive its task. A sync route (``def``, such as
``turns:batch``) runs on a worker thread, which the cancel does not stop, and a frontend
edit finishes in a task of its own (``SyncService.frontend_edit``): both run on after the
503. ``memstrata serve`` therefore stops in order: :class:`SettleBeforeShutdown` waits for
the edits before the app's lifespan shutdown (the end of the event loop would cancel
them), then :meth:`AfterGrace.finish_threads` waits for the worker threads before the
runtime they use is closed. Both share one limit (``after_grace_s``, one passage
embedding call); what outlives it is abandoned, logged (``shutdown.request_threads``, each
thread named by the method, route and user of the request it serves:
:class:`CutOffRoutes`), and does not hold up the exit. So that several cut-off writes do
not queue for the embedding API past it, ``serve`` sends no passage embedding after the
grace (``Memstrata.drain``): their text is stored without those vectors, which the
background re-embedding fills in.
The request's data stays all or nothing either way: a thread writes its rows in one
transaction (``Indexer.index_rounds`` embeds first, outside any transaction), and a process
that exits in the middle of it leaves PostgreSQL to roll it back. Re-posting the same turns is
idempotent, so the retry the 503 asks for is safe whether the first attempt landed or not.

uvicorn cancels a request's task for no other reason, so any cancellation seen here is
taken for the shutdown's.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from types import CodeType, FrameType
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memstrata.api.error_shape import HttpError, error_body
from memstrata.api.middleware import route_template
from memstrata.api.routing import current_user
from memstrata.config import Settings
from memstrata.logs import log_event
from memstrata.runtime import drain_timeout_s

logger = logging.getLogger(__name__)

# Another replica can take the request at once; one second lets the load balancer notice
# that this one has stopped accepting connections.
RETRY_AFTER_S = 1
# A single server has no other replica: the retry waits for it to be back.
SHUTTING_DOWN = (
    "the server is shutting down; retry the request (another replica answers it, or this "
    "server once it is back)"
)


def cut_off_response() -> HttpError:
    """The 503 a request cut off by the shutdown gets."""
    return HttpError(
        503,
        error_body(503, SHUTTING_DOWN, code="shutting_down"),
        {"Retry-After": str(RETRY_AFTER_S), "Connection": "close"},
    )


# What a worker thread still running a cut-off request's route is named by in the log:
# method, route template, user id (None when unauthenticated).
RequestWork = dict[str, str | None]


class CutOffRoutes:
    """The routes of the requests the shutdown cut off, by their endpoint's code object,
    so that a worker thread still running one (a sync route) can be named by the method,
    route and user of its request rather than by a function's qualified name."""

    def __init__(self) -> None:
        self._routes: dict[CodeType, tuple[str, str, str | None]] = {}

    def add(self, scope: Scope, prefix: str = "") -> None:
        route = scope.get("route")
        code = getattr(getattr(route, "endpoint", None), "__code__", None)
        if isinstance(code, CodeType):
            template = route_template(scope, prefix)
            self._routes[code] = (scope["method"], template, _user_parameter(route))

    def describe(self, thread: threading.Thread) -> RequestWork | None:
        """The request whose route ``thread`` runs (its endpoint's frame names the user:
        the parameter that ``current_user`` fills), or None."""
        frame: FrameType | None = sys._current_frames().get(thread.ident or -1)
        while frame is not None:
            known = self._routes.get(frame.f_code)
            if known is not None:
                method, route, parameter = known
                user = frame.f_locals.get(parameter) if parameter else None
                return {
                    "method": method,
                    "route": route,
                    "user_id": user if isinstance(user, str) else None,
                }
            frame = frame.f_back
        return None


def _user_parameter(route: Any) -> str | None:
    """The name of the endpoint parameter that receives the authenticated user id."""
    dependant = getattr(route, "dependant", None)
    for dependency in getattr(dependant, "dependencies", ()):
        if dependency.call is current_user:
            name = dependency.name
            return name if isinstance(name, str) else None
    return None


class ShutdownCutoffMiddleware:
    """Answer a request whose task is cancelled before its response started with a 503;
    its route goes to ``cut_off`` (the worker thread it may leave running is named by it)."""

    def __init__(self, app: ASGIApp, prefix: str = "", cut_off: CutOffRoutes | None = None) -> None:
        self.app = app
        self.prefix = prefix.rstrip("/")
        self.cut_off = cut_off or CutOffRoutes()

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
            self.cut_off.add(scope, self.prefix)
            log_event(
                logger,
                "http.cut_off_by_shutdown",
                logging.WARNING,
                method=scope["method"],
                path=scope["path"],
                route=route_template(scope, self.prefix),
                user_id=state.get("user_id") if isinstance(state, dict) else None,
            )
            # The cancelled task is this request's own and ends right after the answer,
            # which is what the cancel asked for; nothing else waits on it.
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            await cut_off_response().response()(scope, receive, send)


class SettleBeforeShutdown:
    """Await ``settle()`` when the server asks the app to shut down, before the app hears
    of it: uvicorn sends that once it has cancelled the requests still running, and ends
    the event loop (cancelling every task left) soon after the app's shutdown."""

    def __init__(self, app: ASGIApp, settle: Callable[[], Awaitable[object]]) -> None:
        self.app = app
        self.settle = settle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def receive_settled() -> Message:
            message = await receive()
            if message["type"] == "lifespan.shutdown":
                await self.settle()
            return message

        await self.app(scope, receive_settled, send)


class AfterGrace:
    """What ``serve`` waits for once the grace has passed, all within ``limit_s``, counted
    from the first wait."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        # What the threads left running were doing: their request, or the outermost
        # memstrata function on their stack.
        self.abandoned: list[RequestWork | str] = []
        self.routes = CutOffRoutes()  # the app's (``app.state.cut_off``), once it is built
        self._deadline: float | None = None

    def remaining_s(self) -> float:
        if self._deadline is None:
            self._deadline = time.monotonic() + self.limit_s
        return max(0.0, self._deadline - time.monotonic())

    def finish_threads(self) -> None:
        """Join the request threads (see :func:`request_threads`) until the limit; log what
        was waited for and what is abandoned."""
        threads = request_threads()
        running = {thread: self.describe(thread) for thread in threads}
        began = time.monotonic()
        for thread in threads:
            thread.join(self.remaining_s())
        finished = [work for thread, work in running.items() if work and not thread.is_alive()]
        left = [thread for thread in threads if thread.is_alive()]
        self.abandoned = [running[thread] or thread.name for thread in left]
        if finished or left:
            log_event(
                logger,
                "shutdown.request_threads",
                logging.WARNING if left else logging.INFO,
                waited_s=round(time.monotonic() - began, 3),
                finished=finished,
                abandoned=self.abandoned,
                limit_s=self.limit_s,
            )

    def describe(self, thread: threading.Thread) -> RequestWork | str | None:
        """The request ``thread`` serves, else the memstrata function it runs (None: an
        idle worker thread)."""
        return self.routes.describe(thread) or describe_work(thread)


def request_threads() -> list[threading.Thread]:
    """The threads that would keep the process alive at exit: every non-daemon thread but
    this one. Once uvicorn has returned these are the worker threads still running request
    work, and idle ones about to end with the event loop (the runtime's own threads are
    daemons)."""
    me = threading.current_thread()
    return [t for t in threading.enumerate() if t is not me and not t.daemon and t.is_alive()]


def describe_work(thread: threading.Thread) -> str | None:
    """The outermost memstrata function on ``thread``'s stack (``module.qualname``), e.g.
    the sync route of a cut-off request; None for a thread running no memstrata code (an
    idle worker)."""
    frame: FrameType | None = sys._current_frames().get(thread.ident or -1)
    outermost = None
    while frame is not None:
        module = frame.f_globals.get("__name__")
        if isinstance(module, str) and module.startswith("memstrata."):
            outermost = f"{module}.{frame.f_code.co_qualname}"
        frame = frame.f_back
    return outermost


def after_grace_s(settings: Settings) -> float:
    """How long ``serve`` (and ``create_app``'s own runtime) waits, once the grace has
    passed, for the work of the requests it cut off (frontend edits finishing, worker
    threads) before closing the runtime: the library's drain bound
    (:func:`memstrata.runtime.drain_timeout_s`, 13 s with the defaults). A request in its
    embedding call then commits within it (no further call is sent,
    :meth:`Memstrata.drain`); one held up by anything else past it is abandoned, all or
    nothing (docs/DEPLOY.md)."""
    return drain_timeout_s(settings)
