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

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from memstrata.retrieval.breaker import BulkLaneBusyError, Lanes
from memstrata.retrieval.hangup import raise_if_left

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
    """``slots`` queries in flight at most; the others wait in arrival order. A use of the
    passage lane's slots and waiters (``breaker.Lanes``, one rule of waiting for a slot):
    every query of one owner, so each takes a round of its own in arrival order; guarded by
    the search's client, asked every ``LEFT_POLL_S``."""

    def __init__(self, slots: int = QUERY_SLOTS) -> None:
        if slots < 1:
            raise ValueError(f"slots must be at least 1, got {slots}")
        self.slots = slots
        self._lane = Lanes(slots, yield_to_queries=False, guard_recheck_s=LEFT_POLL_S)

    @property
    def waiting(self) -> int:
        """Queries waiting for a slot now."""
        return self._lane.waiting

    @contextmanager
    def turn(self, wait_s: float) -> Iterator[None]:
        """Hold a slot for the block, once one is free and every query that came before
        has had one; ``ClientGoneError`` as soon as the search's client has hung up while
        it waits, ``QueryLaneBusyError`` after ``wait_s`` without a slot."""
        with ExitStack() as held:
            try:
                held.enter_context(self._lane.bulk(give_up_s=wait_s, guard=raise_if_left))
            except BulkLaneBusyError as exc:
                raise QueryLaneBusyError(f"no query slot came free within {wait_s:g} s") from exc
            yield


@contextmanager
def query_turn(lanes: Lanes, lane: QueryLane, wait_s: float) -> Iterator[None]:
    """A short query's way to the query server: counted as a query in flight for the
    passage lane (``Lanes.query``: bulk work yields to it there) while it waits its turn
    in ``lane``."""
    with lanes.query(), lane.turn(wait_s):
        yield
