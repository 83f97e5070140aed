"""The time a memory-file write spends embedding its passages before it answers.

A first save of a big MEMORY.md embedded every new passage inline: a 200 KB file took
135-184 s to answer on a busy 2-core host, and a gateway in front of the server had given
up after 30 s while the write still ran. Where the background worker runs
(``retrieval.healing``, started by ``Memstrata.start_background``), the write embeds for
at most ``MEMSTRATA_EMBEDDING_FILE_BUDGET_S``: its ``deadline`` goes to the embedding
client's ``embed_each``, which then sends no more requests (the one in flight ends); the
passages not sent are stored without a vector (``deferred`` in the index report: nothing
failed) and the worker, woken once the write has committed, embeds them top of the file
first (it claims rows in insertion order). Without the worker, nothing would ever embed
them, so a library that never starts it keeps every passage inline.

An inline batch of conversation rounds (``Indexer.index_rounds``, the batch route) has the
same budget: 300 turns had taken 462 s on a busy host, long after the client had given up
(it does not stop the write). One setting for both, not a second one: both are "how long a
write embeds before it answers", and the worker catches up the same way. A single turn has
it too: its one request, queued behind another user's import, waits no longer than that.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Literal

from memstrata.logs import log_event
from memstrata.retrieval.staging import IndexReport

# The indexer's events keep the indexer's logger name.
logger = logging.getLogger("memstrata.retrieval.indexer")

# Which write stored conversation rounds: the batch route (and the library's imports) or
# the single-turn route (and MCP's conversation_index_turn). The label values of
# memstrata_turn_embeddings_deferred_total.
RoundsWrite = Literal["batch", "turn"]
ROUNDS_WRITES: tuple[RoundsWrite, ...] = ("batch", "turn")


class FileBudget:
    """Off (every passage inline) until ``start``; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._budget_s: float | None = None
        self._wake: Callable[[], None] | None = None
        self._deferred = 0
        self._rounds_deferred: dict[str, int] = {write: 0 for write in ROUNDS_WRITES}

    def start(self, budget_s: float, wake: Callable[[], None]) -> None:
        """Writes from now on embed for at most ``budget_s`` (0: no budget) and call
        ``wake`` (the worker's) after committing rows they left without a vector."""
        with self._lock:
            self._budget_s = budget_s if budget_s > 0 else None
            self._wake = wake

    def stop(self) -> None:
        """Every passage inline again: the worker is stopping."""
        with self._lock:
            self._budget_s, self._wake = None, None

    def deadline(self) -> float | None:
        """When a write starting now stops sending requests (``time.monotonic()``), or None."""
        budget = self._budget_s
        return None if budget is None else time.monotonic() + budget

    @property
    def deferred(self) -> int:
        """Passages left to the worker by budgets so far in this process (``/metrics``)."""
        return self._deferred

    @property
    def rounds_deferred(self) -> dict[str, int]:
        """Passages of conversation rounds left to the worker by budgets so far in this
        process, by the write that stored them (``/metrics``)."""
        with self._lock:
            return dict(self._rounds_deferred)

    def written(self, user_id: str, file: str, report: IndexReport) -> None:
        """After the write committed: count and log what it left to the worker, wake it."""
        if not report.deferred:
            return
        with self._lock:
            self._deferred += report.deferred
            wake = self._wake
        # INFO, not WARNING: nothing failed, and a save of a big file meets it every time;
        # the vectors follow within the worker's pace (``memstrata_embeddings_pending``).
        log_event(
            logger,
            "index.file.deferred",
            user_id=user_id,
            file=file,
            embedded=report.embedded,
            deferred=report.deferred,
            embed_s=round(report.embed_seconds, 2),
        )
        if wake is not None:
            wake()

    def rounds_written(
        self, user_id: str, reports: Sequence[IndexReport], write: RoundsWrite = "batch"
    ) -> None:
        """After rounds committed: count and log what their budget left to the worker, and
        wake it (the single-turn route has no caller that would)."""
        deferred = sum(r.deferred for r in reports)
        if not deferred:
            return
        with self._lock:
            self._rounds_deferred[write] += deferred
            wake = self._wake
        log_event(
            logger,
            "index.rounds.deferred",
            user_id=user_id,
            write=write,
            rounds=len(reports),
            embedded=sum(r.embedded for r in reports),
            deferred=deferred,
            embed_s=round(sum(r.embed_seconds for r in reports), 2),
        )
        if wake is not None:
            wake()
