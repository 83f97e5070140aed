"""Cyclic garbage collection paused around bulk work that allocates many small objects."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while an index is loaded. A cold load allocates ~10
    objects per row (none in a cycle: refcounting frees them), and with other users'
    indexes already in memory each collection it triggered walked all of them: a 10k-row
    load next to three others took 978 ms median with collections on, 712 ms paused
    (``benchmarks/cold_load_gc.py``, docs/BENCHMARKS.md).
    Process-wide, so counted: collections resume when the last concurrent load ends, and
    only if they were on when the first began."""
    global _pauses, _resume
    with _pause_lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()


_pause_lock = threading.Lock()
_pauses = 0
_resume = False
