"""What a runtime leaves to the end of the process: its background workers stopped at
interpreter exit should it never be closed, and a close that runs to its end even when
the block around it is cancelled (``memstrata.runtime.Memstrata``)."""

from __future__ import annotations

import asyncio
import atexit
import weakref
from collections.abc import Coroutine
from typing import Any, Protocol

import anyio


class Background(Protocol):
    """What :func:`stop_at_exit` stops (a ``Memstrata``)."""

    def stop_background(self) -> None: ...


# The runtimes whose background workers run, by id: ``stop_at_exit`` stops them.
RUNNING: dict[int, weakref.ref[Background]] = {}


def stopped_at_exit(mem: Background) -> None:
    """Have ``mem``'s workers stopped first at interpreter exit, should it never be closed
    (a script ending on an exception): the embedded server's exit hook stops the server
    then, and a database monitor still running took that for an outage — ``db.lost``, a
    restart attempt — as the process ended. Exit hooks run last registered first, and the
    server's was registered when it started, before this: registered again on each
    start, the hook stays the last."""
    RUNNING[id(mem)] = weakref.ref(mem)
    atexit.unregister(stop_at_exit)
    atexit.register(stop_at_exit)


def stop_at_exit() -> None:
    for ref in list(RUNNING.values()):
        mem = ref()
        if mem is not None:
            mem.stop_background()
    RUNNING.clear()


def forget_at_exit(mem: Background) -> None:
    """``mem``'s workers are stopped: nothing left to stop at exit."""
    RUNNING.pop(id(mem), None)


async def to_the_end(work: Coroutine[Any, Any, None]) -> None:
    """Await ``work`` until it has ended, then raise a cancellation that came meanwhile: a
    close cut short went on in its thread after the block had ended, and its embedded
    PostgreSQL, still stopping, raced whoever opened the data directory next. anyio's
    shield keeps its cancel scopes out; a plain asyncio cancellation (``asyncio.timeout``)
    is caught and waited past."""
    task = asyncio.ensure_future(work)
    cancelled: asyncio.CancelledError | None = None
    with anyio.CancelScope(shield=True):
        while not task.done():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError as exc:
                cancelled = exc
    task.result()
    if cancelled is not None:
        raise cancelled
