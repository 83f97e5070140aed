"""Watching for a client that hangs up while its route runs: the REST turn and search
routes and MCP's ``conversation_index_turn`` (one rule for both transports, hence not in
a router module)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import anyio
import anyio.to_thread
from starlette.requests import Request

T = TypeVar("T")


async def client_gone(request: Request) -> AsyncIterator[threading.Event]:
    """An event set if the client hangs up while the route runs (its body is read by
    then, so the next ASGI message is the disconnect). A plain task rather than a task
    group around the ``yield``: the group would wrap the route's own exception (an
    ``ApiError``) in an ``ExceptionGroup``, which no error mapping knows."""
    gone = threading.Event()
    watching = asyncio.ensure_future(_watch(request, gone))
    try:
        yield gone
    finally:
        watching.cancel()


async def unless_gone(
    request: Request, gone: threading.Event, work: Callable[[], T | None]
) -> T | None:
    """``work()`` on a worker thread, or None as soon as the client hangs up (``gone`` is
    set then, for ``work`` to stop at its next check: ``retrieval.hangup``). The route does
    not wait for the thread: a search waiting for its query's embedding is abandoned at
    once, the embedding's request left to end unheeded. A cancel scope rather than a task
    group, for the reason ``client_gone`` gives."""
    with anyio.CancelScope() as scope:
        watching = asyncio.ensure_future(_watch(request, gone, then=scope.cancel))
        try:
            return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
        finally:
            watching.cancel()
    return None


async def _watch(
    request: Request, gone: threading.Event, then: Callable[[], object] | None = None
) -> None:
    """Set ``gone`` (and call ``then``) once the client hangs up: the route has read its
    body, so the next ASGI message it could receive is the disconnect."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    gone.set()
    if then is not None:
        then()
