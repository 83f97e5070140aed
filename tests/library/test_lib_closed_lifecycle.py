"""A closed runtime refuses to start its background workers and to be entered again:
``start_background()`` after ``close()`` started a database monitor on the disposed
engine (a false ``db.lost``, polling for ever), and ``with mem:`` after ``close()`` gave
back the closed runtime as if it were open."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest

from memstrata.errors import RuntimeClosedError
from memstrata.runtime import CLOSED_MESSAGE, Memstrata


def _monitors() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "memstrata-dbmon"]


def test_start_background_after_close_is_refused(
    open_runtime: Callable[..., Memstrata],
) -> None:
    mem = open_runtime()
    mem.close()
    before = _monitors()
    with pytest.raises(RuntimeClosedError, match=CLOSED_MESSAGE):
        mem.start_background()
    assert _monitors() == before  # no watcher started on the closed runtime


def test_entering_a_closed_runtime_again_is_refused(
    open_runtime: Callable[..., Memstrata],
) -> None:
    mem = open_runtime()
    with mem:
        pass
    with pytest.raises(RuntimeClosedError, match=CLOSED_MESSAGE), mem:
        pass

    async def enter() -> None:
        async with mem:
            pass

    with pytest.raises(RuntimeClosedError, match=CLOSED_MESSAGE):
        asyncio.run(enter())
