"""Waiting in a test for what another thread or process does: one polling loop."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(
    condition: Callable[[], object],
    timeout_s: float,
    what: str | Callable[[], str],
    *,
    every_s: float = 0.02,
) -> None:
    """Return once ``condition()`` is true, asking every ``every_s``; after ``timeout_s``
    fail the test, naming ``what`` was awaited (a function: called then, to show the state
    that was reached, e.g. a process's output). ``condition`` is asked once more after the
    deadline has passed, so a slow poll never fails a condition that came true in time."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {said}")
        time.sleep(every_s)
