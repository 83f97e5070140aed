"""Telling the operator when the re-embedding worker stops making progress.

Rows waited for a vector for 19 minutes in a drill (615 pending, then 750; 6 healed)
while every round's requests timed out and the rows went back, with nothing logged above
INFO. ``StallWatch`` follows the worker's rounds: a round that had rows to embed (or that
an open circuit kept from claiming them) and stored no vector is no progress; once no
progress has lasted ``after_s``, ``embedding.heal.stalled`` is logged (WARNING: `users`
whose rows went back, `pending` — the backlog ``/readyz`` shows —, `cause`: the last
error, `stalled_s`, and a `hint` when one text alone outlasts its timeout), once per
stall; ``embedding.heal.progressing`` (INFO, `stalled_s`) when a round stores vectors
again or finds nothing left to do.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from memstrata.logs import log_event
from memstrata.retrieval.embedding_failures import EmbeddingTimeoutError

logger = logging.getLogger("memstrata.retrieval.healing")

# No vector stored for this long while rows wait: the worker is stalled.
STALL_AFTER_S = 60.0

_TOO_SLOW_HINT = (
    "one text alone is not embedded within its timeout: the embedding server is too slow "
    "for it (a busy host); raise MEMSTRATA_EMBEDDING_TIMEOUT_S or give the server more CPU"
)


class StallWatch:
    """One worker's progress (module docstring); called by its thread only."""

    def __init__(self, model: str, after_s: float = STALL_AFTER_S) -> None:
        self.model = model
        self.after_s = after_s
        self._since: float | None = None  # the first round without progress
        self._told = False
        self._users: list[str] = []

    def progressed(self, why: str) -> None:
        """A round stored vectors (or found nothing to embed): any stall is over."""
        if self._told and self._since is not None:
            log_event(
                logger,
                "embedding.heal.progressing",
                model=self.model,
                stalled_s=round(time.monotonic() - self._since, 1),
                why=why,
            )
        self._since, self._told, self._users = None, False, []

    def no_progress(
        self, cause: object, users: Sequence[str] | None, pending: Callable[[], int]
    ) -> None:
        """A round with rows to embed stored none; ``cause``: the error it met (``users``:
        whose rows went back, ``None`` when it claimed none: the last known are kept)."""
        now = time.monotonic()
        if self._since is None:
            self._since = now
        if users:
            self._users = sorted(set(users))
        if self._told or now - self._since < self.after_s:
            return
        waiting = pending()
        if not waiting:  # an open circuit with nothing to embed stalls nothing
            return
        self._told = True
        hint: dict[str, Any] = (
            {"hint": _TOO_SLOW_HINT} if isinstance(cause, EmbeddingTimeoutError) else {}
        )
        log_event(
            logger,
            "embedding.heal.stalled",
            logging.WARNING,
            model=self.model,
            users=self._users,
            pending=waiting,
            cause=str(cause),
            stalled_s=round(now - self._since, 1),
            **hint,
        )
