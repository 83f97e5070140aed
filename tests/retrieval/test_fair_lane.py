"""The bulk (passage) lane goes round the users with requests waiting (``breaker.Lanes``):
one user's queued import requests do not hold up another user's single write, the lane
still closes for everyone at shutdown, and it still yields to queries for a bounded time.
Threads only, no embedding API: the order in which waiters get the slot is deterministic
because each waiter is queued (``Lanes.waiting``) before the next one starts."""

from __future__ import annotations

import threading
import time

import pytest

from memstrata.retrieval.breaker import (
    BACKGROUND_OWNER,
    BulkLaneClosedError,
    Lanes,
    bulk_owner,
    current_bulk_owner,
    round_for,
)

pytestmark = pytest.mark.timeout(30)


class Queue:
    """Bulk requests queued one by one behind the slot held by the test."""

    def __init__(self, lanes: Lanes) -> None:
        self.lanes = lanes
        self.served: list[str] = []
        self.refused: list[str] = []
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def add(self, owner: str, name: str) -> None:
        """Start a request of ``owner`` and return once it waits in the lane."""
        queued = self.lanes.waiting
        thread = threading.Thread(target=self._request, args=(owner, name), daemon=True)
        thread.start()
        self.threads.append(thread)
        wait_until(lambda: self.lanes.waiting == queued + 1)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(10)
        assert not any(t.is_alive() for t in self.threads), "a request is still waiting"

    def _request(self, owner: str, name: str) -> None:
        try:
            with self.lanes.bulk(owner), self._lock:
                self.served.append(name)
        except BulkLaneClosedError:
            with self._lock:
                self.refused.append(name)


def wait_until(condition: object, timeout_s: float = 5.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


# -- the rule -----------------------------------------------------------------------------


def test_a_round_is_one_past_the_owners_last_and_never_before_the_one_served() -> None:
    assert round_for(None, 7) == 7  # a newcomer joins the round being served
    assert round_for(7, 7) == 8  # its next request waits for the next round
    assert round_for(9, 7) == 10  # many queued: one round each
    assert round_for(3, 7) == 7  # idle meanwhile: no rounds banked


# -- the order of the handover ------------------------------------------------------------


def test_another_user_gets_the_next_slot_after_the_one_in_flight() -> None:
    """User A's request is in flight and three more of A's wait; user B's single request,
    arriving last, is served next, then A's in the order they came."""
    lanes = Lanes(bulk_slots=1)
    queue = Queue(lanes)
    with lanes.bulk("user-a"):  # A's request in flight
        for n in range(3):
            queue.add("user-a", f"a{n}")
        queue.add("user-b", "b")
        time.sleep(0.05)
        assert queue.served == []  # nobody passes the request in flight
    queue.join()
    assert queue.served == ["b", "a0", "a1", "a2"]


def test_users_with_requests_queued_take_turns() -> None:
    lanes = Lanes(bulk_slots=1)
    queue = Queue(lanes)
    with lanes.bulk("user-a"):
        for n in range(3):
            queue.add("user-a", f"a{n}")
        for n in range(3):
            queue.add("user-b", f"b{n}")
        queue.add(BACKGROUND_OWNER, "healer")
    queue.join()
    # B and the background work had nothing in flight: each joins the round being served.
    assert queue.served == ["b0", "healer", "a0", "b1", "a1", "b2", "a2"]


def test_the_request_that_frees_the_slot_does_not_take_it_back() -> None:
    """A thread that ends one request and at once asks for the next (embed_each's batches)
    waits behind the other users' requests already queued."""
    lanes = Lanes(bulk_slots=1)
    queue = Queue(lanes)

    def importer() -> None:
        with lanes.bulk("user-a"):
            wait_until(lambda: lanes.waiting == 1)  # B queued behind this request
            queue.served.append("a first")
        with lanes.bulk("user-a"):
            queue.served.append("a second")

    thread = threading.Thread(target=importer, daemon=True)
    with lanes.bulk("user-c"):  # the slot is busy while A and B line up, A first
        thread.start()
        wait_until(lambda: lanes.waiting == 1)
        queue.add("user-b", "b")
    thread.join(10)
    queue.join()
    assert queue.served == ["a first", "b", "a second"]


def test_more_slots_go_round_the_users_too() -> None:
    lanes = Lanes(bulk_slots=2)
    queue = Queue(lanes)
    with lanes.bulk("user-a"), lanes.bulk("user-a"):  # both slots A's
        for n in range(3):
            queue.add("user-a", f"a{n}")
        queue.add("user-b", "b")
    queue.join()
    assert queue.served[0] == "b"


def test_the_owner_comes_from_the_callers_context() -> None:
    assert current_bulk_owner() == BACKGROUND_OWNER
    with bulk_owner("user-a"):
        assert current_bulk_owner() == "user-a"
        with bulk_owner("user-b"):
            assert current_bulk_owner() == "user-b"
        assert current_bulk_owner() == "user-a"
    assert current_bulk_owner() == BACKGROUND_OWNER
    seen: list[str] = []
    with bulk_owner("user-a"):  # a new thread starts with an empty context
        thread = threading.Thread(target=lambda: seen.append(current_bulk_owner()))
        thread.start()
        thread.join(5)
    assert seen == [BACKGROUND_OWNER]


# -- what did not change ------------------------------------------------------------------


def test_closing_the_lane_wakes_and_refuses_every_waiter() -> None:
    lanes = Lanes(bulk_slots=1)
    queue = Queue(lanes)
    with lanes.bulk("user-a"):  # in flight: runs to its end
        for n in range(3):
            queue.add("user-a", f"a{n}")
        queue.add("user-b", "b")
        queue.add(BACKGROUND_OWNER, "healer")
        began = time.monotonic()
        lanes.close_bulk()
        queue.join()
        assert time.monotonic() - began < 1.0
        assert sorted(queue.refused) == ["a0", "a1", "a2", "b", "healer"]
        assert queue.served == [] and lanes.waiting == 0
        assert lanes.in_flight == (0, 1)
    with pytest.raises(BulkLaneClosedError), lanes.bulk("user-c"):
        pass
    with lanes.query():  # queries are not affected
        pass


def test_a_stream_of_queries_holds_bulk_back_for_max_wait_s_at_most() -> None:
    lanes = Lanes(bulk_slots=1)
    with lanes.query():  # a query in flight all along
        began = time.monotonic()
        with lanes.bulk("user-a", max_wait_s=0.3):
            waited = time.monotonic() - began
    assert 0.25 <= waited < 2.0


def test_the_lane_forgets_owners_once_it_is_idle() -> None:
    lanes = Lanes(bulk_slots=1)
    for n in range(50):
        with lanes.bulk(f"user-{n}"):
            pass
    with lanes.bulk("user-last"):
        assert lanes._latest == {"user-last": 0}
