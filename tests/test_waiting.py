"""The tests' one polling loop: it returns once the condition holds, and on timeout fails
saying what was awaited."""

from __future__ import annotations

import threading
import time

import pytest

from tests.waiting import wait_for


def test_it_returns_once_another_thread_makes_the_condition_true() -> None:
    done = threading.Event()
    threading.Timer(0.1, done.set).start()
    began = time.monotonic()
    wait_for(done.is_set, 5, "the timer")
    assert 0.09 <= time.monotonic() - began < 2


def test_on_timeout_it_says_what_was_awaited() -> None:
    asked: list[float] = []

    def never() -> bool:
        asked.append(time.monotonic())
        return False

    with pytest.raises(AssertionError, match=r"^timed out after 0\.2 s waiting for the moon$"):
        wait_for(never, 0.2, "the moon", every_s=0.05)
    assert len(asked) >= 4 and asked[-1] - asked[0] >= 0.2  # asked again after the deadline


def test_a_callable_what_shows_the_state_reached_at_the_timeout() -> None:
    state = {"rows": 3}
    with pytest.raises(AssertionError, match=r"waiting for no rows \(3 left\)$"):
        wait_for(lambda: state["rows"] == 0, 0.05, lambda: f"no rows ({state['rows']} left)")
