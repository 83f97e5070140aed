"""One computation at a time for the unauthenticated probes, shared by every caller.

``/readyz`` opens a new database connection and counts the re-embedding backlog across all
users; ``/metrics`` counts the backlog too and renders ~50 KB of text. Both are public, so a
flood of either multiplied that work: 100 connections on ``/metrics`` took another user's
searches from 6 ms to over 4 s (security review, 2026-12-04). With :class:`SingleFlight` a
request that arrives while the computation runs waits for that run and gets its result,
so the database sees at most one of them at a time however many arrive; a request that
arrives when none runs starts a new one, so no answer is older than the request.

The run has a worker thread of its own (its own capacity limiter), not one of AnyIO's
default 40 that the sync routes share: when a frozen database held those, ``/readyz`` and
``/metrics`` queued behind them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Generic, TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")


class SingleFlight(Generic[T]):
    """``await get()`` runs ``compute`` on a worker thread, or joins the run under way."""

    def __init__(self, compute: Callable[[], T]) -> None:
        self._compute = compute
        self._lock = threading.Lock()
        self._running: Future[T] | None = None
        self._limiter: anyio.CapacityLimiter | None = None  # made on the event loop

    async def get(self) -> T:
        with self._lock:
            running = self._running
            if running is None:
                running = self._running = Future()
                owner = True
            else:
                owner = False
        if not owner:
            # Waiting holds no worker thread: a flood queues on the event loop, not the pool.
            return await asyncio.wrap_future(running)
        try:
            # Shielded: the joiners wait for this run, so a disconnecting owner must not
            # end it for them.
            if self._limiter is None:
                self._limiter = anyio.CapacityLimiter(1)  # one run at a time: one thread
            with anyio.CancelScope(shield=True):
                value = await anyio.to_thread.run_sync(self._compute, limiter=self._limiter)
        except BaseException as exc:
            running.set_exception(exc)
            raise
        else:
            running.set_result(value)
            return value
        finally:
            with self._lock:
                self._running = None
