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

Below one text, the timeout stretches instead (``stretch``: the factor on the worker's
requests' timeouts, doubled when one text alone timed out on a server that answers, up to
``embedding_slow.SLOW_STRETCH_MOST``): without it, the next text paid the short timeout
first again. It halves after an answer that came within the unstretched timeout, and the
size grows again only once it is back to 1.
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
        self._stretch = 1
        self._lock = threading.Lock()

    @property
    def cap(self) -> int:
        return self._cap

    @property
    def stretch(self) -> int:
        return self._stretch

    def stretched(self, most: int) -> int:
        """One text alone timed out on a server that answers: the new factor (doubled, at
        most ``most``)."""
        with self._lock:
            self._stretch = min(most, self._stretch * 2)
            return self._stretch

    def timed_out(self, size: int) -> None:
        """A request of ``size`` texts timed out: the next ones hold half as many."""
        with self._lock:
            self._cap = max(1, min(self._cap, size // 2))

    def answered(self, size: int, took_s: float, timeout_s: float) -> None:
        """A request of ``size`` texts answered after ``took_s``; ``timeout_s``: its
        timeout unstretched."""
        with self._lock:
            if self._stretch > 1:
                if took_s < timeout_s:
                    self._stretch //= 2
                return
            if size >= self._cap and took_s < GROW_BELOW * timeout_s:
                self._cap = min(self._most, self._cap + 1)
