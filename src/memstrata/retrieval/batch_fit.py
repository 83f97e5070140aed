"""How many texts the background worker's passage requests hold: as many as the server
answers within their timeout.

A request that times out is split (``embedding_failures.SlowBatchError``); without a
memory of it, every later request of the worker started at the full batch again and paid
one timeout first, on a server that kept computing each abandoned request. ``BatchFit``
halves the worker's request size at each such timeout and grows it by one text after a
request answered in less than half its timeout, so the size follows the server's pace:
on a busy host (one full-length chunk 10 s) it stays small, and once the host is quiet it
returns to ``MEMSTRATA_EMBEDDING_BATCH_SIZE``. Writes, which a user waits for, keep the
configured size.
"""

from __future__ import annotations

import threading

# A request answered within this share of its timeout leaves room for one text more.
GROW_BELOW = 0.5


class BatchFit:
    """The worker's request size, between 1 and ``most`` (thread-safe)."""

    def __init__(self, most: int) -> None:
        self._most = most
        self._cap = most
        self._lock = threading.Lock()

    @property
    def cap(self) -> int:
        return self._cap

    def timed_out(self, size: int) -> None:
        """A request of ``size`` texts timed out: the next ones hold half as many."""
        with self._lock:
            self._cap = max(1, min(self._cap, size // 2))

    def answered(self, size: int, took_s: float, timeout_s: float) -> None:
        """A request of ``size`` texts answered after ``took_s`` of its ``timeout_s``."""
        with self._lock:
            if size >= self._cap and took_s < GROW_BELOW * timeout_s:
                self._cap = min(self._most, self._cap + 1)
