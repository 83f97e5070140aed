"""At most a few queries of this process in flight to the query server, the others waiting
their turn here, first come first served, where a search whose client hangs up can still
leave without sending anything.

The local query server computes one request at a time. Without a bound, every search of a
wave whose clients hung up a moment later had already sent its query: the server computed
them all, each held a connection of the query pool until its 2 s timeout, and a user still
waiting meanwhile queued behind them and fell back to BM25 (``retrieval.hangup``). Here a
search's query waits for a slot of the lane instead, and leaves the queue unsent once its
client has hung up (``hangup.client_left``). One that waits longer than its query timeout
is not sent either: its search answers with BM25 and the usual warning, and the wait is no
failure of the server's (the lane raises before the circuit is asked).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from memstrata.retrieval.breaker import Lanes
from memstrata.retrieval.hangup import ClientGoneError, client_left

# A search of another process (a replica sharing the server) waits behind at most this
# many of ours. 1, 2 and 4 measured alike (docs/RELIABILITY.md); 2, so that one query the
# server is slow to answer does not hold every other search of the process behind it.
QUERY_SLOTS = 2

# How often a waiter looks whether its client has hung up (the event is set by the search
# route, which cannot wake this thread): a departure is seen within this.
LEFT_POLL_S = 0.05


class QueryLaneBusyError(Exception):
    """No slot of the query lane came free within the query's timeout; nothing was sent
    (not an ``EmbeddingError`` here: the transport says what it means for the search)."""


class QueryLane:
    """``slots`` queries in flight at most; the others wait in arrival order."""

    def __init__(self, slots: int = QUERY_SLOTS) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        self.slots = slots
        self._lock = threading.Lock()
        self._free = slots
        self._queue: deque[threading.Event] = deque()

    @property
    def waiting(self) -> int:
        """Queries waiting for a slot now."""
        with self._lock:
            return len(self._queue)

    @contextmanager
    def turn(self, wait_s: float) -> Iterator[None]:
        """Hold a slot for the block, once one is free and every query that came before
        has had one; ``ClientGoneError`` as soon as the search's client has hung up while
        it waits, ``QueryLaneBusyError`` after ``wait_s`` without a slot."""
        self._take(wait_s)
        try:
            yield
        finally:
            self._give()

    def _take(self, wait_s: float) -> None:
        if client_left():
            raise ClientGoneError("the search's client hung up before its query was sent")
        with self._lock:
            if self._free > 0 and not self._queue:
                self._free -= 1
                return
            me = threading.Event()
            self._queue.append(me)
        give_up = time.monotonic() + wait_s
        while not me.wait(max(0.0, min(LEFT_POLL_S, give_up - time.monotonic()))):
            left = client_left()
            if not left and time.monotonic() < give_up:
                continue
            with self._lock:
                if me.is_set():  # given a slot just now: handled below
                    break
                self._queue.remove(me)
            if left:
                raise ClientGoneError("the search's client hung up while its query waited")
            raise QueryLaneBusyError(f"no query slot came free within {wait_s:g} s")
        if client_left():  # handed a slot as it left: the next waiter takes it
            self._give()
            raise ClientGoneError("the search's client hung up while its query waited")

    def _give(self) -> None:
        with self._lock:
            if self._queue:
                self._queue.popleft().set()  # the slot passes on, never free in between
            else:
                self._free += 1


@contextmanager
def query_turn(lanes: Lanes, lane: QueryLane, wait_s: float) -> Iterator[None]:
    """A short query's way to the query server: counted as a query in flight for the
    passage lane (``Lanes.query``: bulk work yields to it there) while it waits its turn
    in ``lane``."""
    with lanes.query(), lane.turn(wait_s):
        yield
