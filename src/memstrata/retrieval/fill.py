"""``memstrata reindex``'s embedding of one user's rows stored without a vector.

The background worker of ``memstrata serve`` (``retrieval.healing``) embeds the same rows
by itself. Both follow one rule of which rows a claim holds (``queue.HELD``): a fill
leaves the rows a worker holds to it, and leases each batch it takes, so the worker
leaves that batch alone in turn (``queue.UNCLAIMED``) — neither embeds a row the other is
embedding. Rows a worker gave back and pauses on (the API failed them) are no claim: a
fill, the operator's "embed now", takes them at once. A fill that finds rows held at the
end may wait for them (their vectors, or their lease to run out, when it embeds them
itself).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from memstrata.db.engine import transaction
from memstrata.logs import log_event
from memstrata.retrieval.embeddings import EmbeddingProvider
from memstrata.retrieval.passage_vectors import embed_and_store
from memstrata.retrieval.records import StoredChunk
from memstrata.retrieval.repository import EmbeddingRepository

# The indexer's events (index.fill, index.fill.failed) keep the indexer's logger name.
logger = logging.getLogger("memstrata.retrieval.indexer")

# A fill leases each batch it embeds, as the worker leases its claims (120 s for a batch of
# 32): a batch of 256 conversation rounds took up to 251 s on the local model, a 2-core host
# busy with other work (load 3.5-7). Past the lease a worker may embed the rows too: work
# wasted, each row still stored once (``replace_vectors``). A fill that is killed (not
# interrupted: that gives the batch back) leaves its batch to the workers this long at most.
FILL_LEASE_S = 600.0
# How often a fill waiting for held rows looks at them again.
HELD_POLL_S = 1.0

Progress = Callable[[int, int], None]


def fill_missing(
    sessions: sessionmaker[Session],
    embedder: EmbeddingProvider,
    user_id: str,
    batch: int = 256,
    *,
    progress: Progress | None = None,
    wait_s: float = 0.0,
    waiting: Callable[[int, float], None] | None = None,
) -> int:
    """Embed ``user_id``'s rows without a vector of ``embedder``'s model that no claim
    holds, ``batch`` at a time. Returns rows embedded.

    ``progress(done, total)`` is called after each stored batch: rows embedded so far, and
    that plus the rows no claim holds still to do. Then, while rows are held and ``wait_s``
    has not passed, it looks again every ``HELD_POLL_S``, calling ``waiting(held,
    seconds_left)`` first, and embeds the rows whose lease ran out. Stops at a batch of
    which nothing could be embedded (the API failed): the rest would fail alike."""
    deadline = time.monotonic() + wait_s
    done = 0
    while True:
        done, failed = _fill_free(sessions, embedder, user_id, batch, done, progress)
        held = 0 if failed else count_missing(sessions, user_id, embedder.name, held=True)
        left = deadline - time.monotonic()
        if not held or left <= 0:
            return done
        if waiting is not None:
            waiting(held, left)
        time.sleep(min(HELD_POLL_S, left))


def count_missing(
    sessions: sessionmaker[Session], user_id: str, model: str, *, held: bool | None = None
) -> int:
    """Rows of ``user_id`` without a vector of ``model``: all, or (``held``) those a claim
    holds now, or (``held=False``) those none holds."""
    with sessions() as session:
        return EmbeddingRepository(session, user_id).count_missing(model, held=held)


def _fill_free(
    sessions: sessionmaker[Session],
    embedder: EmbeddingProvider,
    user_id: str,
    batch: int,
    done: int,
    progress: Progress | None,
) -> tuple[int, bool]:
    """Batches of the rows no claim holds, until none is left: rows embedded so far (from
    ``done``), and whether it stopped at a batch that failed."""
    while True:
        with transaction(sessions) as session:
            todo, until = EmbeddingRepository(session, user_id).claim_missing(
                embedder.name, batch, FILL_LEASE_S
            )
        if not todo or until is None:
            return done, False
        try:
            embedded, stored, error = embed_and_store(sessions, embedder, user_id, todo)
        except BaseException:
            with contextlib.suppress(SQLAlchemyError):  # else the lease runs out by itself
                _release(sessions, user_id, todo, until)
            raise
        _release(sessions, user_id, todo, until)
        if not embedded:
            log_event(logger, "index.fill.failed", logging.WARNING, user_id=user_id, error=error)
            return done, True
        done += stored
        log_event(logger, "index.fill", user_id=user_id, embedded=stored)
        if progress is not None:
            progress(done, done + count_missing(sessions, user_id, embedder.name, held=False))


def _release(
    sessions: sessionmaker[Session], user_id: str, todo: Sequence[StoredChunk], until: datetime
) -> None:
    """The lease of a batch's rows that got no vector ends now (``release_lease``)."""
    with transaction(sessions) as session:
        EmbeddingRepository(session, user_id).release_lease([c.id for c in todo], until)
