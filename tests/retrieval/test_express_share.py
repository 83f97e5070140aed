"""The express slot's share of the query server (``retrieval.express_share``).

One user writing turns without a pause took the express slot for nearly every write, and
another user's searches on the query server waited behind those passages (p95 6× quiet).
A small write now goes express only while the express passages of the last ``window_s``
seconds took less than ``share`` of them. Times are passed in: no test here sleeps.
"""

from __future__ import annotations

import math
import random
import sys
import threading
from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from memstrata.config import Settings
from memstrata.retrieval.express_share import ExpressShare, allowed_in_s, busy_s, may_go_express

pytestmark = pytest.mark.timeout(30)


# -- the rule -----------------------------------------------------------------------------


def test_busy_time_counts_each_passage_for_its_part_inside_the_window() -> None:
    spans = [(0.0, 0.5), (1.0, 1.25), (3.5, 4.0)]
    assert busy_s(spans, now=4.0, window_s=4.0) == 1.25
    assert busy_s(spans, now=4.25, window_s=4.0) == 1.0  # half of the first is past
    assert busy_s(spans, now=5.5, window_s=4.0) == 0.5  # only the last is left
    assert busy_s(spans, now=3.75, window_s=4.0) == 1.0  # the last is half done: its half
    assert busy_s([], now=9.0, window_s=4.0) == 0.0


def test_express_only_under_the_share_of_the_window() -> None:
    assert may_go_express(busy=0.99, share=0.25, window_s=4.0)
    assert not may_go_express(busy=1.0, share=0.25, window_s=4.0)  # a quarter of 4 s used
    assert may_go_express(busy=4.0, share=1.0, window_s=4.0)  # 1: never refuses


def test_once_the_share_is_reached_small_writes_are_deferred() -> None:
    share = ExpressShare(share=0.25, window_s=4.0)
    assert share.allows(0.0)
    share.record(0.0, 0.5)
    assert share.allows(0.5)
    share.record(0.6, 1.1)  # 1.0 s of the last 4: a quarter
    assert not share.allows(1.1)
    assert not share.allows(4.0)


def test_as_the_window_slides_past_them_small_writes_go_express_again() -> None:
    share = ExpressShare(share=0.25, window_s=4.0)
    share.record(0.0, 0.5)
    share.record(0.6, 1.1)
    assert not share.allows(4.0)  # the window (0, 4] holds all 1.0 s of them
    assert share.allows(4.05)  # (0.05, 4.05] holds 0.95 s
    assert share.allows(6.0)


def test_a_single_long_passage_defers_until_the_window_has_left_most_of_it() -> None:
    share = ExpressShare(share=0.25, window_s=4.0)
    share.record(0.0, 3.0)  # a 3 s passage on a busy host: three times the share
    assert not share.allows(3.0)
    assert not share.allows(5.9)  # (1.9, 5.9] still holds 1.1 s of it
    assert share.allows(6.1)  # 0.9 s
    longer = ExpressShare(share=0.25, window_s=4.0)
    longer.record(0.0, 10.0)  # longer than the window: all of it busy
    assert not longer.allows(10.0)
    assert longer.allows(13.1)


def test_a_share_of_one_never_defers() -> None:
    share = ExpressShare(share=1.0, window_s=4.0)
    share.record(0.0, 4.0)
    assert share.allows(4.0)


def test_how_long_until_the_window_has_left_enough_of_the_passages() -> None:
    """A write the share turned back waits in the passage lane; the lane wakes it when the
    window will have slid far enough, so the express slot can take it then."""
    spans = [(0.0, 0.5), (0.6, 1.1)]  # 1.0 s: a quarter of 4 s, from 4.0 on less
    assert allowed_in_s(spans, now=1.1, share=0.25, window_s=4.0) == pytest.approx(2.9)
    assert allowed_in_s(spans, now=4.5, share=0.25, window_s=4.0) == 0.0
    assert allowed_in_s([(0.0, 3.0)], now=3.0, share=0.25, window_s=4.0) == pytest.approx(3.0)
    # Still running at ``now`` (recorded by another thread a moment later): it keeps
    # filling the window until it ends at 5, then leaves it from 4 on: 1 s left at 8.
    assert allowed_in_s([(0.0, 5.0)], now=3.0, share=0.25, window_s=4.0) == pytest.approx(5.0)
    assert allowed_in_s([], now=3.0, share=0.25, window_s=4.0) == 0.0
    assert allowed_in_s([(0.0, 4.0)], now=4.0, share=1.0, window_s=4.0) == 0.0  # never refuses


def test_the_wait_ends_exactly_where_the_rule_allows_again() -> None:
    rng = random.Random(7)
    for _ in range(300):
        spans, at = [], 0.0
        for _ in range(rng.randint(1, 6)):
            at += rng.uniform(0.0, 0.6)
            spans.append((at, at + rng.uniform(0.01, 0.8)))
            at = spans[-1][1]
        now = at + rng.uniform(-0.2, 0.5)
        share, window = rng.choice([0.05, 0.1, 0.25, 0.5]), rng.choice([1.0, 2.0, 4.0])
        wait = allowed_in_s(spans, now, share, window)
        after = busy_s(spans, now + wait + 1e-9, window)
        assert may_go_express(after, share, window), (spans, now, share, window)
        if wait > 0:
            before = busy_s(spans, now + wait - 1e-6, window)
            assert not may_go_express(before, share, window), (spans, now, share, window)


def test_the_share_says_how_long_a_turned_back_write_waits() -> None:
    share = ExpressShare(share=0.25, window_s=4.0)
    share.record(0.0, 0.5)
    share.record(0.6, 1.1)
    assert share.allowed_in_s(1.1) == pytest.approx(2.9)
    assert share.allowed_in_s(4.05) == 0.0


@pytest.mark.parametrize(
    ("share", "window_s"), [(0.0, 4.0), (-0.1, 4.0), (1.5, 4.0), (math.nan, 4.0), (0.25, 0.0)]
)
def test_a_share_outside_its_bounds_is_refused(share: float, window_s: float) -> None:
    with pytest.raises(ValueError, match="must be above 0"):
        ExpressShare(share, window_s)


@pytest.mark.parametrize("value", ["0", "1.01", "-1", "nan"])
def test_the_setting_says_what_it_is_and_how_to_turn_the_slot_off(value: str) -> None:
    with pytest.raises(ValidationError, match="MEMSTRATA_EMBEDDING_EXPRESS_TOKENS=0"):
        Settings(embedding_express_share=value)


def test_the_setting_takes_a_share_up_to_one() -> None:
    assert Settings(embedding_express_share="1").embedding_express_share == 1.0
    assert Settings(embedding_express_share="0.1").embedding_express_share == 0.1


# -- shared between threads ---------------------------------------------------------------


@pytest.fixture
def frequent_switches() -> Iterator[None]:
    """Let the interpreter switch threads every few bytecodes: an unguarded read of the
    passages while another thread records one then fails within a few hundred calls."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@pytest.mark.usefixtures("frequent_switches")
def test_threads_record_and_ask_at_once_and_no_passage_is_lost() -> None:
    """Every write of one client asks and records on the same ``ExpressShare``."""
    threads, per_thread = 4, 1500
    # The last second holds 1000 passages of 0.5 ms, 0.5 s: just over this share of it,
    # so losing any one of them to a race would let a write through.
    share = ExpressShare(share=0.4999, window_s=1.0)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for k in range(per_thread):
                ended = (k * threads + n) * 0.001  # the threads' passages interleave
                share.record(ended - 0.0005, ended)
                share.allows(ended)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    workers = [threading.Thread(target=writer, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(20)
    assert errors == []
    last = (per_thread * threads - 1) * 0.001
    assert not share.allows(last)
    assert share.allows(last + 0.01)  # 10 of them out of the window: under the share
