"""The page's timers under the test's control: a save's read-backs wait up to two minutes
in all (file-save.js), which a test takes in jumps rather than in real time."""

from __future__ import annotations

import time
from collections.abc import Callable

from playwright.sync_api import Locator, Page

# longer than any one wait of the page's read-back backoff
STEP_MS = 30_000


def pause_clock(page: Page) -> None:
    """From now on the page's timers fire only when ``step`` (or the test) moves the clock."""
    page.clock.install()
    page.clock.pause_at(time.time() * 1000 + 1000)


def step_until(page: Page, done: Callable[[], bool], *, most: int = 20) -> None:
    """Jump the paused clock ``STEP_MS`` at a time until ``done()`` (at most ``most`` jumps),
    giving each timer's request time to be answered by the real server."""
    for _ in range(most):
        if done():
            return
        page.clock.fast_forward(STEP_MS)
        page.wait_for_timeout(400)


def says(locator: Locator, text: str) -> Callable[[], bool]:
    """``step_until``'s test: ``locator`` contains ``text``."""
    return lambda: text in (locator.text_content() or "")
