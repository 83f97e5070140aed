"""A circuit breaker in front of an embedding API's server.

``CircuitBreaker``: after ``threshold`` consecutive failed requests (timeouts, transport
errors, 5xx, garbage) the embedder is not called for ``cooldown_s``; every call fails at
once, so a search answers BM25-only in milliseconds instead of waiting for timeouts. When
the cool-down has passed, exactly one request is let through as a probe (half-open): its
success closes the breaker, its failure opens it for another cool-down. It remembers
when the outage began (the first opening, not the cool-downs after failed probes), so the
closing can say how long it lasted, and says when a "still failing" notice is due.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
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
        # The thread that took the probe (a request is sent on the thread that asked).
        self._prober: int | None = None
        # When the circuit first opened in the current outage, and when its last "still
        # failing" notice was due (``still_failing_due``).
        self._outage_since: float | None = None
        self._noticed_at: float | None = None
        # The error of the last failed request, while failures go on (the open circuit's
        # refusals can say what kind of failure opened it).
        self.last_failure: Exception | None = None

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
            self._prober = threading.get_ident()
            return True

    def allow_peek(self) -> bool:
        """Would ``allow()`` let a request out now? (Does not take the probe.)"""
        with self._lock:
            if self._opened_at is None:
                return True
            return not self._probing and self._clock() - self._opened_at >= self.cooldown_s

    def record_success(self) -> float | None:
        """A request was answered: close the breaker. Returns how long it had been open
        (seconds since it first opened in this outage) when this closed it, else None."""
        with self._lock:
            since = self._outage_since
            self._failures = 0
            self._opened_at = None
            self._probing = False
            self._outage_since = None
            self._noticed_at = None
            self.last_failure = None
        return None if since is None else max(0.0, self._clock() - since)

    def record_failure(self, error: Exception | None = None) -> bool:
        """Count a failed request (``error``: why it failed); True when this failure
        opened the breaker."""
        with self._lock:
            self._failures += 1
            self.last_failure = error
            was_open = self._opened_at is not None
            if self._probing or self._failures >= self.threshold:
                self._opened_at = self._clock()
                self._probing = False
                if not was_open:
                    self._outage_since = self._noticed_at = self._opened_at
                return not was_open
            return False

    def record_abandoned(self) -> None:
        """A request of this thread ended that nobody waited for any more (its search's
        client hung up): neither a failure nor a success. Were it the half-open probe, the
        next request probes instead (held for ever, the probe refused every request:
        ``allow`` lets one out at a time); otherwise nothing changes."""
        with self._lock:
            if self._probing and self._prober == threading.get_ident():
                self._probing = False
                self._prober = None

    @property
    def failures(self) -> int:
        """Failed requests in a row (since the last success)."""
        with self._lock:
            return self._failures

    def still_failing_due(self, every_s: float) -> float | None:
        """While the breaker is open (or half-open): once per ``every_s``, how long it has
        been open; None otherwise. Each call that returns a number starts the next period,
        so whoever calls it logs one notice per period, however many requests fail."""
        with self._lock:
            if self._outage_since is None or self._noticed_at is None:
                return None
            now = self._clock()
            if now - self._noticed_at < every_s:
                return None
            self._noticed_at = now
            return now - self._outage_since

    def retry_after_s(self) -> float:
        """Seconds until a probe may go out (0 when closed or due)."""
        with self._lock:
            if self._opened_at is None:
                return 0.0
            return max(0.0, self.cooldown_s - (self._clock() - self._opened_at))
