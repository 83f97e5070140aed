"""How much of the query server's time small writes may take (the express slot's share).

A small write on the express slot (``embedding_plan``, ``breaker.Lanes``) is embedded on
the query server, which computes one request at a time: a search that arrives meanwhile
waits for that passage. One user writing turns without a pause beside another user's
import put a passage in front of nearly every search there (another user's search p95 6×
its quiet value, docs/BENCHMARKS.md). So the express slot gets a share of the server's
time: a write may go express only while the express passages of the last ``window_s``
seconds took less than ``share`` of that window; otherwise it takes its turn in the
passage lane. An occasional writer stays well under the share and keeps going express; a
writer without a pause uses it up and waits its turns like everyone else's work.

``busy_s`` and ``may_go_express`` are the rule; ``ExpressShare`` keeps the recent passages
for it, shared by every thread of one embedding client. Times are passed in (any
monotonic clock), so the rule is tested without sleeping.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable

# (began, ended) of one passage request on the query server, in a monotonic clock's seconds.
Span = tuple[float, float]


def busy_s(spans: Iterable[Span], now: float, window_s: float) -> float:
    """Seconds of the window ``(now - window_s, now]`` that ``spans`` cover, each counted
    for its part inside it: a long passage that ended a while ago counts less and less as
    the window slides past it. Overlapping spans (a passage sent while the passage circuit
    is open, beside one on the express slot) add up: the server ran them one after the
    other anyway."""
    start = now - window_s
    return sum(max(0.0, min(ended, now) - max(began, start)) for began, ended in spans)


def may_go_express(busy: float, share: float, window_s: float) -> bool:
    """May a small write take the express slot, the window's express passages having taken
    ``busy`` seconds? Only while that is under ``share`` of the window; a ``share`` of 1
    never refuses (the express slot as it was before the share)."""
    return share >= 1.0 or busy < share * window_s


class ExpressShare:
    """The express passages of the last ``window_s`` seconds, and the rule over them.
    Thread-safe: every write of one embedding client asks and records here."""

    def __init__(self, share: float, window_s: float) -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError(f"share must be above 0 and at most 1, got {share}")
        if window_s <= 0.0:
            raise ValueError(f"window_s must be above 0, got {window_s}")
        self.share = share
        self.window_s = window_s
        self._lock = threading.Lock()
        self._spans: deque[Span] = deque()

    def allows(self, now: float) -> bool:
        """May a small write go express at ``now``?"""
        with self._lock:
            self._forget(now)
            busy = busy_s(self._spans, now, self.window_s)
        return may_go_express(busy, self.share, self.window_s)

    def record(self, began: float, ended: float) -> None:
        """A passage request on the query server ran from ``began`` to ``ended``."""
        with self._lock:
            self._spans.append((began, ended))
            self._forget(ended)

    def _forget(self, now: float) -> None:
        # Spans that ended before the window can never count again. Requests end in about
        # the order they began (one express slot), so the oldest ending is at the left.
        while self._spans and self._spans[0][1] <= now - self.window_s:
            self._spans.popleft()
