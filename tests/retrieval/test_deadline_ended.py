"""A write's deadline ended early (its caller gone): ``embedding_provider.passed``."""

from __future__ import annotations

import threading
import time

from memstrata.retrieval.breaker import GUARD_RECHECK_S, BulkLaneBusyError, Lanes, bulk_owner
from memstrata.retrieval.embedding_provider import deadline_ends_when, lane_guard, passed
from tests.waiting import wait_for


def test_a_deadline_passes_once_its_write_is_ended_and_only_inside_the_block() -> None:
    ahead = time.monotonic() + 3600
    ended = threading.Event()
    with deadline_ends_when(ended):
        assert not passed(ahead)
        ended.set()
        assert passed(ahead)
        # No deadline: no worker would embed what the write left, so it is never ended.
        assert not passed(None)
    assert not passed(ahead)  # another write's deadline, outside the block


def test_another_thread_s_write_is_not_ended() -> None:
    ahead = time.monotonic() + 3600
    ended = threading.Event()
    ended.set()
    seen: list[bool] = []
    with deadline_ends_when(ended):
        elsewhere = threading.Thread(target=lambda: seen.append(passed(ahead)))
        elsewhere.start()
        elsewhere.join()
        assert passed(ahead)
    assert seen == [False]


def test_a_request_waiting_for_a_slot_leaves_once_its_write_is_ended() -> None:
    """``lane_guard``: the lane asks it while the request waits, so the request leaves the
    queue unsent, within ``GUARD_RECHECK_S`` of the end, though the slot stays taken."""
    lanes = Lanes()
    ended = threading.Event()
    left: list[float] = []

    def queued_write() -> None:
        with (
            deadline_ends_when(ended),
            bulk_owner("alice", lane_guard(None, time.monotonic() + 3600)),
        ):
            try:
                with lanes.bulk("alice"):
                    left.append(-1.0)  # it got the slot: sent
            except BulkLaneBusyError:
                left.append(time.monotonic())

    with lanes.bulk("bob"):  # bob's request in flight
        write = threading.Thread(target=queued_write)
        write.start()
        wait_for(lambda: lanes.waiting == 1, 10, "alice's request queued")
        ended.set()
        at = time.monotonic()
        write.join(10)
        assert left and left[0] - at < GUARD_RECHECK_S + 0.2, left
        assert lanes.waiting == 0
    # No deadline (nothing else would embed it): the guard is the write's own, never ended.
    assert lane_guard(None, None) is None
    assert lane_guard(_database_up, None) is _database_up


def _database_up() -> None:
    """A write's own guard (``Database.refuse_if_lost``) that finds nothing wrong."""
