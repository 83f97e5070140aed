"""The re-embedding worker's write-back: a claim's vectors stored one user at a time.

Apart from :mod:`memstrata.retrieval.healing` because it is the worker's one step that
writes rows (under each user's lock, as new rows) and the one place where a user whose
rows cannot be written back is given up on without ending the round for other users.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import psycopg
from sqlalchemy.exc import DataError
from sqlalchemy.orm import Session, sessionmaker

from memstrata.db.engine import transaction
from memstrata.logs import describe, log_failure
from memstrata.retrieval import queue
from memstrata.retrieval.repository import EmbeddingRepository

# The worker's events, under the logger they had before the write-back left healing.py.
logger = logging.getLogger("memstrata.retrieval.healing")


def write_back(
    sessions: sessionmaker[Session],
    model: str,
    todo: list[queue.Claimed],
    vectors: dict[int, list[float]],
    on_caught_up: Callable[[str], None] | None,
) -> tuple[int, list[tuple[int, str]]]:
    """Store the vectors one user at a time: the rows written, and the rows given up on
    because a user's rows cannot be read back (a ``DataError``, e.g. a value the driver
    cannot represent) — one such user must not keep every other user in the same batch
    from getting vectors on every run. A database outage still ends the run."""
    by_user: dict[str, list[int]] = {}
    for c in todo:
        if c.id in vectors:
            by_user.setdefault(c.user_id, []).append(c.id)
    written = 0
    unwritable: list[tuple[int, str]] = []
    for user_id, ids in by_user.items():
        try:
            with transaction(sessions) as session:
                repo = EmbeddingRepository(session, user_id)
                repo.lock()
                stored = repo.replace_vectors({i: vectors[i] for i in ids}, model)
        except (DataError, psycopg.DataError) as exc:  # the driver's own, from the binary load
            log_failure(logger, "embedding.heal.write_failed", exc, user_id=user_id)
            unwritable.extend((i, f"cannot be written back: {describe(exc)}") for i in ids)
            continue
        written += stored
        if stored and on_caught_up is not None:
            with sessions() as session:
                caught_up = queue.pending_for(session, user_id, model) == 0
            if caught_up:
                on_caught_up(user_id)
    return written, unwritable
