"""A request abandoned because its search's client hung up is neither a failure nor a
success of the circuit's (``retrieval.hangup``): failing, it counts nothing; were it the
half-open probe, it hands the probe on, since the probe held for ever refused every
request. Another thread's abandoned request leaves the probe where it is. A fake clock
stands for the cool-down."""

from __future__ import annotations

import threading

from memstrata.retrieval.circuit import CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def half_open() -> tuple[CircuitBreaker, Clock]:
    clock = Clock()
    breaker = CircuitBreaker(threshold=1, cooldown_s=5.0, clock=clock)
    assert breaker.record_failure(RuntimeError("timed out"))
    clock.now = 6.0
    assert breaker.allow()  # this thread takes the probe
    assert not breaker.allow()
    return breaker, clock


def test_an_abandoned_probe_hands_the_probe_on() -> None:
    breaker, _ = half_open()
    breaker.record_abandoned()
    assert breaker.state == "half_open" and breaker.failures == 1
    assert breaker.allow()  # the next request probes


def test_another_threads_abandoned_request_leaves_the_probe_held() -> None:
    breaker, _ = half_open()
    other = threading.Thread(target=breaker.record_abandoned)
    other.start()
    other.join()
    assert not breaker.allow()  # the probe is still out


def test_an_abandoned_request_of_a_closed_circuit_changes_nothing() -> None:
    breaker = CircuitBreaker(threshold=2)
    assert breaker.allow()
    breaker.record_failure()
    breaker.record_abandoned()
    assert (breaker.state, breaker.failures) == ("closed", 1)
