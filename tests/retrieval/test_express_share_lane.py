"""The express slot's share, asked when the slot would be taken (``breaker.Lanes``).

The share used to be asked once, when a write entered the lane: a write let in while an
express passage was in flight took the slot after it even when that passage had used the
share up, and a write turned back waited in the passage lane for the importer's request
however soon the window freed. Now the lane asks the share each time it would give a
waiter the express slot, and wakes a turned-back waiter when the window will have freed.
Threads (and the fault-injection fake for the embedder's side); the share's spans are
recorded with times of the monotonic clock the lane reads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from memstrata.retrieval.breaker import Lanes, bulk_owner
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.express_share import ExpressShare
from tests.retrieval.express_support import (
    Request,
    embedder,
    importer_holding,
    wait_until,
)
from tests.retrieval.fault_server import FaultServer

pytestmark = pytest.mark.timeout(30)


class Counter:
    """The lane's ``on_deferred``: how many small writes the share kept off the slot."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def lanes_with(share: ExpressShare, deferred: Counter) -> Lanes:
    return Lanes(
        1, yield_to_queries=False, express_slots=1, express_share=share, on_deferred=deferred
    )


# -- the lane -----------------------------------------------------------------------------


def test_a_write_turned_back_takes_the_express_slot_once_the_window_frees() -> None:
    share, deferred = ExpressShare(share=0.1, window_s=1.0), Counter()
    now = time.monotonic()
    share.record(now - 0.8, now - 0.5)  # 0.3 s of the last 1 s; under 0.1 s from now + 0.4
    lanes = lanes_with(share, deferred)
    with lanes.bulk("importer"):  # another user's import holds the passage slot throughout
        began = time.monotonic()
        with lanes.bulk("bob", express=True) as route:
            took = time.monotonic() - began
    assert route == "express"
    assert took >= 0.35 - (began - now)  # not before the window had left enough
    assert took < 2.0  # woken by the window, not by the import (which never ended)
    assert deferred.count == 0  # it went express in the end: not kept off the slot


def test_the_share_is_asked_when_the_slot_comes_free_not_when_the_write_arrived() -> None:
    """Carol's write arrives while Bob's express passage is in flight and the window is
    empty; Bob's passage then uses the share up, so Carol does not get the slot after it."""
    share, deferred = ExpressShare(share=0.1, window_s=4.0), Counter()
    lanes = lanes_with(share, deferred)
    bob_done, carol_done = threading.Event(), threading.Event()
    with lanes.bulk("importer"):
        bob = Request(lanes, "bob", bob_done)
        assert bob.route == "express"
        carol = Request(lanes, "carol", carol_done)
        assert share.allowed_in_s(time.monotonic()) == 0.0  # she was let in
        began = time.monotonic()
        time.sleep(0.5)
        share.record(began - 0.1, time.monotonic())  # Bob's passage: 0.6 s of the 4 s
        bob_done.set()
        bob.join()
        time.sleep(0.2)
        assert carol.route is None  # the slot is free, the share is not
    wait_until(lambda: carol.route is not None)
    assert carol.route == "bulk"  # after the importer's request, in her turn
    carol_done.set()
    carol.join()
    assert deferred.count == 1


def test_a_write_turned_back_that_gives_up_is_counted_once() -> None:
    share, deferred = ExpressShare(share=0.1, window_s=4.0), Counter()
    now = time.monotonic()
    share.record(now - 1.0, now)
    lanes = lanes_with(share, deferred)
    with lanes.bulk("importer"):
        bob = Request(lanes, "bob", threading.Event(), give_up_s=0.3)
        for _ in range(3):  # each search's end wakes the waiters: the share is asked again
            with lanes.query():
                time.sleep(0.02)
        bob.join()
    assert (bob.gave_up, bob.route, deferred.count) == (True, None, 1)


def test_alone_a_small_write_takes_its_bulk_slot_and_is_not_counted() -> None:
    share, deferred = ExpressShare(share=0.1, window_s=4.0), Counter()
    now = time.monotonic()
    share.record(now - 1.0, now)  # the share used up
    lanes = lanes_with(share, deferred)
    with lanes.bulk("bob", express=True) as route:
        assert route == "bulk"  # its turn, a free slot: the share is not asked
    assert deferred.count == 0


# -- the embedder -------------------------------------------------------------------------


@pytest.fixture
def servers() -> Iterator[tuple[FaultServer, FaultServer]]:
    with FaultServer() as passages, FaultServer() as queries:
        yield passages, queries


def write(client: OpenAICompatibleEmbedder, owner: str, text: str) -> None:
    with bulk_owner(owner):
        [vector] = client.embed_each([text])
    assert isinstance(vector, list)


def test_a_write_let_in_during_an_express_passage_that_used_the_share_up_waits_its_turn(
    servers: tuple[FaultServer, FaultServer],
) -> None:
    passages, queries = servers
    queries.mode, queries.delay_s = "slow", 0.3  # 0.3 s a passage: over 0.05 of 4 s
    with embedder(passages, queries, express_share=0.05, express_window_s=4.0) as client:
        with importer_holding(client.lanes) as released:
            bob = threading.Thread(target=write, args=(client, "bob", "Bob: one turn"))
            bob.start()
            wait_until(lambda: len(queries.requests) == 1)  # Bob's passage under way
            carol = threading.Thread(target=write, args=(client, "carol", "Carol: one turn"))
            carol.start()
            wait_until(lambda: client.lanes.waiting == 1)
            bob.join(5)
            threading.Timer(0.5, released.set).start()
            carol.join(5)
        requests, _, deferred = client.express_use.counts
    assert [r.body["input"] for r in queries.requests] == [["Bob: one turn"]]
    assert [r.body["input"] for r in passages.requests] == [["Carol: one turn"]]
    assert (requests, deferred) == (1, 1)


def test_a_write_turned_back_goes_express_once_the_window_frees(
    servers: tuple[FaultServer, FaultServer],
) -> None:
    """Not after the importer's request (4 s here): a second after Bob's first passage."""
    passages, queries = servers
    queries.mode, queries.delay_s = "slow", 0.1  # 0.1 s a passage: over 0.05 of 1 s
    with embedder(passages, queries, express_share=0.05, express_window_s=1.0) as client:
        with importer_holding(client.lanes, hold_s=4.0):  # 4 s: the importer's request
            write(client, "bob", "Bob: first turn")
            began = time.monotonic()
            write(client, "bob", "Bob: second turn")
            took = time.monotonic() - began
        requests, _, deferred = client.express_use.counts
    assert 0.8 <= took < 2.5, took  # the window had to leave most of the first passage
    assert [r.body["input"] for r in queries.requests] == [
        ["Bob: first turn"],
        ["Bob: second turn"],
    ]
    assert passages.requests == []
    assert (requests, deferred) == (2, 0)
