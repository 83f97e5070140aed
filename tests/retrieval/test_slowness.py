"""``Slowness.sign`` (what /readyz says of a slow server) and ``BatchFit.stretch`` (the
worker's longer timeout), with a clock of the test's and the cheap request's answer
injected: plain functions over plain data."""

from __future__ import annotations

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
    s.answered_late(10.14, "passage")
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
