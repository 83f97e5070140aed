"""Bring a user's index up to date off the request path after an import.

A history imported through the batch endpoint left the user with thousands of rows and no
index snapshot, so the first search — the first time anyone read those rows — paid the
whole cold load (0.6–1.6 s at 10k rows over HTTP, docs/BENCHMARKS.md). After each batch
the warmer, on one background thread, counts the user's conversation rows the stored
snapshot lacks; from the snapshot threshold up it brings the user's index up to date in
this process's cache — incremental after the first time — which schedules the snapshot
write. The first search after an import then finds a warm index here and a current
snapshot in every other process. Small batches (a live conversation) cost one count query
in the background and load nothing.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from memstrata.logs import log_event, log_failure
from memstrata.retrieval import snapshot
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.repository import EmbeddingRepository

logger = logging.getLogger(__name__)


def should_warm(uncovered_rows: int, min_rows: int) -> bool:
    """Warm once the stored snapshot lacks as many conversation rows as would make a
    snapshot worth writing (``snapshot.should_write``'s rule); never with snapshots off."""
    return snapshot.should_write(uncovered_rows, min_rows)


class IndexWarmer:
    """One background thread, at most one pending job per user and model."""

    def __init__(self, cache: IndexCache) -> None:
        self.cache = cache
        self._jobs: queue.Queue[tuple[str, str | None] | None] = queue.Queue()
        self._pending: set[tuple[str, str | None]] = set()
        self._lock = threading.Lock()
        self._running = False
        self._thread: threading.Thread | None = None
        self.warmed = 0
        self.failed = 0

    @property
    def min_rows(self) -> int:
        writer = self.cache.snapshots
        return writer.min_rows if writer is not None else 0

    def schedule(self, user_id: str, model: str | None) -> None:
        """Ask for ``user_id``'s index to be checked and warmed; returns at once."""
        if self.min_rows <= 0:
            return
        key = (user_id, model)
        with self._lock:
            if key in self._pending:
                return  # the pending job will see these rows too
            self._pending.add(key)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="memstrata-index-warmer", daemon=True
                )
                self._thread.start()
        self._jobs.put(key)

    def idle(self, timeout: float = 30.0) -> bool:
        """Wait until no job is pending (tests, benchmarks); False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._pending and not self._running:
                    return True
            time.sleep(0.01)
        return False

    def close(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._jobs.put(None)
            thread.join(timeout=10)

    def warm_now(self, user_id: str, model: str | None) -> bool:
        """The job itself: True when the index was brought up to date."""
        with self.cache.sessions() as session:
            uncovered = EmbeddingRepository(session, user_id).rows_after_snapshot(
                snapshot.model_key(model), snapshot.format_key()
            )
        if not should_warm(uncovered, self.min_rows):
            return False
        started = time.perf_counter()
        self.cache.get(user_id, model)
        log_event(
            logger,
            "index.warmed",
            user_id=user_id,
            uncovered_rows=uncovered,
            ms=round((time.perf_counter() - started) * 1000, 1),
        )
        return True

    def _run(self) -> None:
        while (key := self._jobs.get()) is not None:
            # Out of pending first: rows committed while this job runs ask for another.
            with self._lock:
                self._pending.discard(key)
                self._running = True
            try:
                if self.warm_now(*key):
                    self.warmed += 1
            except Exception as exc:  # a derived cache: log, never raise into a request
                log_failure(logger, "index.warm_failed", exc, user_id=key[0])
                self.failed += 1
            finally:
                with self._lock:
                    self._running = False
