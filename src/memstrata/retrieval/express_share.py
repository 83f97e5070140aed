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

The lane asks when it would give a write the slot, not when the write arrives: a passage
in flight meanwhile may use the share up. A write turned back waits its turn in the passage
lane, and is woken when the window will have freed (``allowed_in_s``) to take the slot
after all if that comes first.

``busy_s``, ``may_go_express`` and ``allowed_in_s`` are the rule; ``ExpressShare`` keeps the
recent passages for it, shared by every thread of one embedding client. Times are passed in
(any monotonic clock), so the rule is tested without sleeping.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Sequence

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


def allowed_in_s(spans: Sequence[Span], now: float, share: float, window_s: float) -> float:
    """Seconds from ``now`` until ``may_go_express`` allows again if no passage is added:
    0 when it allows now. A write turned back waits this long at most before it asks again
    (``breaker.Lanes``). At the instant returned the window holds exactly the share (the
    rule is strict); any moment after, less."""
    limit = share * window_s
    if may_go_express(busy_s(spans, now, window_s), share, window_s):
        return 0.0
    # Each span's part of the window is linear in time between these instants (where the
    # window's edges pass its ends), so the busy time is linear between consecutive ones.
    kinks = sorted({t for b, e in spans for t in (b, e, b + window_s, e + window_s) if t > now})
    before, busy_before = now, busy_s(spans, now, window_s)
    for at in kinks:
        busy = busy_s(spans, at, window_s)
        if busy < limit:
            fall = (busy_before - limit) / (busy_before - busy)
            return before + fall * (at - before) - now
        before, busy_before = at, busy
    return before - now  # unreachable: past the last kink the window is empty


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

    def allowed_in_s(self, now: float) -> float:
        """Seconds from ``now`` until a small write may go express (``allowed_in_s``)."""
        with self._lock:
            self._forget(now)
            return allowed_in_s(list(self._spans), now, self.share, self.window_s)

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
