"""``Slowness.sign`` and ``unanswered`` (what /readyz says of a slow or a frozen server)
and ``BatchFit.stretch`` (the worker's longer timeout), with a clock of the test's and the
cheap request's answer injected: plain functions over plain data."""

from __future__ import annotations

import time
from collections.abc import Mapping

from memstrata.retrieval.batch_fit import BatchFit
from memstrata.retrieval.embedding_slow import SLOW_SHOWN_S, SLOW_STRETCH_MOST, Slowness, SlowSign


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def slowness(clock: Clock, up: list[bool]) -> Slowness:
    def probe(url: str, headers: Mapping[str, str], timeout_s: float) -> bool:
        return up[0]

    return Slowness("http://api/v1/models", {}, clock=clock, probe=probe)


def test_a_timeout_is_slow_only_once_the_server_answered_after_it() -> None:
    clock, up = Clock(), [True]
    s = slowness(clock, up)
    assert s.sign(timed_out_last=False) is None
    s.timed_out(6.0, "passage")
    assert s.sign(timed_out_last=False) is None  # not asked yet
    clock.now += 0.1
    assert s.check_now(6.0)
    assert s.sign(timed_out_last=False) == SlowSign(6.0, "MEMSTRATA_EMBEDDING_TIMEOUT_S")
    clock.now += 0.1
    s.timed_out(2.0, "query")  # a later, shorter timeout: the longest is told
    assert s.sign(timed_out_last=False) is None  # not asked since
    clock.now += 0.1
    s.check_now(2.0)
    assert s.sign(timed_out_last=False) == SlowSign(6.0, "MEMSTRATA_EMBEDDING_TIMEOUT_S")


def test_a_server_that_does_not_answer_is_not_slow() -> None:
    clock, up = Clock(), [False]
    s = slowness(clock, up)
    s.timed_out(6.0, "passage")
    clock.now += 0.1
    assert not s.check_now(6.0)
    assert s.sign(timed_out_last=True) is None


def test_slowness_is_told_for_a_minute_or_while_its_circuit_stays_open() -> None:
    clock, up = Clock(), [True]
    s = slowness(clock, up)
    s.timed_out(2.0, "query")
    clock.now += 0.1
    s.check_now(2.0)
    clock.now += SLOW_SHOWN_S + 1
    assert s.sign(timed_out_last=False) is None
    assert s.sign(timed_out_last=True) == SlowSign(2.0, "MEMSTRATA_EMBEDDING_QUERY_TIMEOUT_S")


def test_a_late_answer_is_slow_without_a_timeout() -> None:
    clock, up = Clock(), [True]
    s = slowness(clock, up)
    s.answered(10.14, 6.0, "passage", began=clock.now - 10.14)
    assert s.sign(timed_out_last=False) == SlowSign(10.1, "MEMSTRATA_EMBEDDING_TIMEOUT_S")
    clock.now += SLOW_SHOWN_S + 1
    assert s.sign(timed_out_last=False) is None


def test_the_stretch_doubles_to_its_cap_and_halves_back() -> None:
    fit = BatchFit(8)
    fit.timed_out(2)
    assert (fit.cap, fit.stretch) == (1, 1)
    assert [fit.stretched(SLOW_STRETCH_MOST) for _ in range(3)] == [2, 4, 4]
    fit.answered(1, took_s=7.0, timeout_s=6.0)  # needed the longer timeout: kept
    assert fit.stretch == 4
    fit.answered(1, took_s=1.0, timeout_s=6.0)  # would have fitted the base
    assert (fit.stretch, fit.cap) == (2, 1)
    fit.answered(1, took_s=1.0, timeout_s=6.0)
    assert (fit.stretch, fit.cap) == (1, 1)
    fit.answered(1, took_s=1.0, timeout_s=6.0)  # only now the size grows again
    assert (fit.stretch, fit.cap) == (1, 2)


class Probe:
    """The cheap request's answer, and how often it was asked (``check_soon`` asks it in a
    thread of its own)."""

    def __init__(self, up: bool) -> None:
        self.up = up
        self.asked = 0

    def __call__(self, url: str, headers: Mapping[str, str], timeout_s: float) -> bool:
        self.asked += 1
        return self.up


def asked(probe: Probe, times: int) -> None:
    end = time.monotonic() + 5
    while probe.asked < times:
        assert time.monotonic() < end, "the cheap request was not asked"
        time.sleep(0.005)
    time.sleep(0.05)  # its answer noted


def test_a_request_past_its_timeout_asks_and_a_freeze_is_told_until_an_answer() -> None:
    clock, probe = Clock(), Probe(up=False)
    s = Slowness("http://api/v1/models", {}, clock=clock, probe=probe)
    began = clock.now
    key = s.sent(5.0)
    clock.now += 4.0
    assert not s.unanswered() and probe.asked == 0  # within its timeout: nothing asked
    clock.now += 2.0
    assert not s.unanswered()  # past it: asked aside
    asked(probe, 1)
    assert s.unanswered()  # frozen, before any timeout or circuit
    clock.now += 14.0  # resumed: the request answers after 20 s
    s.done(key)
    s.answered(20.0, 5.0, "passage", began)
    assert not s.unanswered()
    assert s.sign(timed_out_last=False) is None  # it waited through the freeze: not slow


def test_timeouts_of_a_freeze_are_forgotten_once_the_cheap_request_goes_unanswered() -> None:
    clock, probe = Clock(), Probe(up=False)
    s = Slowness("http://api/v1/models", {}, clock=clock, probe=probe)
    s.timed_out(13.0, "passage", began=clock.now - 13.0)
    assert not s.check_now(13.0)
    probe.up = True
    clock.now += 1.0
    assert s.unanswered()  # asks again aside, once told
    asked(probe, 2)
    assert not s.unanswered()  # back: it answered the cheap request
    assert s.sign(timed_out_last=False) is None  # the freeze's timeout is not slowness
    s.timed_out(6.0, "passage", began=clock.now)  # a later one is, once it answers after
    clock.now += 0.1
    assert s.check_now(6.0)
    assert s.sign(timed_out_last=False) == SlowSign(6.0, "MEMSTRATA_EMBEDDING_TIMEOUT_S")
