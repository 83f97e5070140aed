"""One background thread running keyed jobs in order, at most one pending job per key.

Used for work derived from the database that must never reach a request: index snapshot
writes and index warming. A job leaves "pending" when it starts, so work submitted while
it runs (rows committed meanwhile) queues another one rather than being lost.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
P = TypeVar("P")


class KeyedJobs(Generic[K, P]):
    def __init__(
        self,
        name: str,
        run: Callable[[K, P], None],
        on_error: Callable[[K, Exception], None],
    ) -> None:
        self.name = name
        self._run_job = run
        self._on_error = on_error
        self._jobs: queue.Queue[tuple[K, P] | None] = queue.Queue()
        self._pending: set[K] = set()
        self._running = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, key: K, payload: P) -> bool:
        """Queue a job unless one for ``key`` is already pending; returns at once."""
        with self._lock:
            if key in self._pending:
                return False
            self._pending.add(key)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
        self._jobs.put((key, payload))
        return True

    def idle(self, timeout: float = 30.0) -> bool:
        """Wait until no job is pending or running (tests, benchmarks); False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._pending and not self._running:
                    return True
            time.sleep(0.01)
        return False

    def close(self, timeout_s: float = 10.0) -> None:
        """Finish the queued jobs and stop the thread (waits at most ``timeout_s``)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._jobs.put(None)
            thread.join(timeout=timeout_s)

    def _loop(self) -> None:
        while self._run_next():
            pass

    def _run_next(self) -> bool:
        """Run one job; False at the stop mark. The job lives in this frame only, so the
        thread holds nothing of it while it waits for the next (a payload can be large)."""
        job = self._jobs.get()
        if job is None:
            return False
        key, payload = job
        del job
        with self._lock:
            self._pending.discard(key)
            self._running = True
        try:
            self._run_job(key, payload)
        except Exception as exc:  # derived work: reported, never raised into a request
            self._on_error(key, exc)
        finally:
            del payload  # before the job counts as done: ``idle`` means nothing is held
            with self._lock:
                self._running = False
        return True
