"""A bulk request's turn in the passage lane (``breaker.Lanes``): whose turn, which round,
the waiter the lane queues, and when a small write may take the express slot instead.

The bulk slots go round the users with requests waiting, so one user's heavy work does not
stall another user's small write. Each bulk request is stamped with a round (``round_for``:
one past its owner's previous request, never earlier than the round being served) and a
free slot goes to the waiting request of the earliest round, first come first within a
round. A user whose import queued many requests takes one round per request, while another
user's single write gets the next slot after the ones in flight. (Before, any waiter could
take a freed slot, the thread that had just freed it first: one user's three import threads
held another user's one-turn write up for 8-116 s.) Whose turn a request waits in: the
user of ``breaker.bulk_owner`` around the call (the indexer's writes), else ``BACKGROUND_OWNER``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

# The owner of bulk requests made outside ``bulk_owner``: the healer's re-embedding (one of
# its requests may hold several users' rows, and its claims already serve the users with
# rows waiting in turn, ``queue.claim``) and benchmarks. Together they count as one more
# user in the lane's rounds. Not a valid user id (``validate_user_id`` refuses an empty
# one), so no user shares its turns.
BACKGROUND_OWNER = ""


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
class BulkWaiter:
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
    # The express share refused it the slot (counted once, unless it goes express later).
    turned_back: bool = field(compare=False, default=False)
    # Called before it takes a slot: raises to end the request unsent (``bulk_owner``).
    guard: Callable[[], None] | None = field(compare=False, default=None)
    # A user's small or one-passage write: first at the passage server (``Lanes._across``).
    first: bool = field(compare=False, default=False)


def may_express(in_flight: int, slots: int, owned: int) -> bool:
    """May a small write that cannot take a bulk slot now take the express slot? Only
    while one is free (``in_flight`` of ``slots``) and the write is its owner's only
    request waiting or in flight (``owned``): then everything it would wait for is other
    owners' work. An owner with requests queued (an import, parallel writes) waits its
    turns as before, so the express slot serves small writes, not a second importer."""
    return in_flight < slots and owned == 1
