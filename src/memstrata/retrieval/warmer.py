"""Bring a user's index up to date off the request path after an import.

A history imported through the batch endpoint left the user with thousands of rows and no
index snapshot, so the first search — the first time anyone read those rows — paid the
whole cold load (0.6–1.6 s at 10k rows over HTTP, docs/BENCHMARKS.md). After each batch
the warmer, on one background thread, counts the user's conversation rows the stored
snapshot lacks; from the snapshot threshold up it brings the user's index up to date in
this process's cache — incremental after the first time — and has the snapshot written,
going by that count rather than the index's own (which misses a snapshot dropped by a
deletion after the index last exported one). The first search after an import then finds
a warm index here and a current snapshot in every other process. Small batches (a live
conversation) cost one count query in the background and load nothing.
"""

from __future__ import annotations

import logging
import time

from memstrata.logs import log_event, log_failure
from memstrata.retrieval import snapshot
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.jobs import KeyedJobs
from memstrata.retrieval.snapshot_repository import SnapshotRepository

logger = logging.getLogger(__name__)


class IndexWarmer:
    """One background thread, at most one pending job per user and model."""

    def __init__(self, cache: IndexCache) -> None:
        self.cache = cache
        self._jobs: KeyedJobs[tuple[str, str | None], None] = KeyedJobs(
            "memstrata-index-warmer", self._job, self._failed
        )
        self.warmed = 0
        self.failed = 0

    @property
    def min_rows(self) -> int:
        writer = self.cache.snapshots
        return writer.min_rows if writer is not None else 0

    def schedule(self, user_id: str, model: str | None) -> None:
        """Ask for ``user_id``'s index to be checked and warmed; returns at once. A job
        already pending for the user will see these rows too."""
        if self.min_rows > 0:
            self._jobs.submit((user_id, model), None)

    def idle(self, timeout: float = 30.0) -> bool:
        """Wait until no job is pending (tests, benchmarks); False on timeout."""
        return self._jobs.idle(timeout)

    def close(self) -> None:
        self._jobs.close()

    def warm_now(self, user_id: str, model: str | None) -> bool:
        """The job itself: True when the index was brought up to date."""
        with self.cache.sessions() as session:
            uncovered = SnapshotRepository(session, user_id).rows_after_snapshot(
                snapshot.model_key(model), snapshot.format_key()
            )
        # Warm when a snapshot would be worth writing: the snapshot rule is the warm rule.
        if not snapshot.should_write(uncovered, self.min_rows):
            return False
        started = time.perf_counter()
        self.cache.warm(user_id, model, uncovered)
        log_event(
            logger,
            "index.warmed",
            user_id=user_id,
            uncovered_rows=uncovered,
            ms=round((time.perf_counter() - started) * 1000, 1),
        )
        return True

    def _job(self, key: tuple[str, str | None], _: None) -> None:
        if self.warm_now(*key):
            self.warmed += 1

    def _failed(self, key: tuple[str, str | None], exc: Exception) -> None:
        log_failure(logger, "index.warm_failed", exc, user_id=key[0])
        self.failed += 1
