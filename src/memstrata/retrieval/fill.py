"""``memstrata reindex``'s embedding of one user's rows stored without a vector.

The background worker of ``memstrata serve`` (``retrieval.healing``) embeds the same rows
by itself. Both follow one rule of which rows a claim holds (``queue.HELD``): a fill
leaves the rows a worker holds to it, and leases each batch it takes, so the worker
leaves that batch alone in turn (``queue.UNCLAIMED``) — neither embeds a row the other is
embedding. Rows a worker gave back and pauses on (the API failed them) are no claim: a
fill, the operator's "embed now", takes them at once. A fill that finds rows held at the
end may wait for them (their vectors, or their lease to run out, when it embeds them
itself).

A fill claims as a worker does (``retrieval.claimer``): it holds an advisory lock of its
own while it runs, on a connection outside the pool, and each batch records the lock's
token. A run cut off from its database (the server restarted, the connection cut) exits
with its batch still claimed; its lock ends with its connection, so the next fill (or a
worker) takes that batch back at once (``take_over``) instead of leaving it, as "held by a
running server's worker", for the 10 minutes of its lease. A live worker's rows, and a
running fill's, stay held: their lock is still there.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from functools import partial

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from memstrata.db.engine import transaction
from memstrata.logs import log_event
from memstrata.retrieval import claimer
from memstrata.retrieval.embeddings import EmbeddingProvider
from memstrata.retrieval.passage_vectors import embed_and_store
from memstrata.retrieval.records import StoredChunk
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.repository_reads import Lease

# The indexer's events (index.fill, index.fill.failed) keep the indexer's logger name.
logger = logging.getLogger("memstrata.retrieval.indexer")

# A fill leases each batch it embeds, as the worker leases its claims (120 s for a batch of
# 32): a batch of 256 conversation rounds took up to 251 s on the local model, a 2-core host
# busy with other work (load 3.5-7). Past the lease a worker may embed the rows too: work
# wasted, each row still stored once (``replace_vectors``). A fill that is killed (not
# interrupted: that gives the batch back, nor cut off: its lock ends, see the module's
# docstring) leaves its batch to the workers this long at most; so does a fill that could
# not take its lock (behind a pooler in transaction mode).
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
    holds, ``batch`` at a time, after ending the claims whose claimer is gone
    (``take_over``). Returns rows embedded.

    ``progress(done, total)`` is called after each stored batch: rows embedded so far, and
    that plus the rows no claim holds still to do. Then, while rows are held and ``wait_s``
    has not passed, it looks again every ``HELD_POLL_S``, calling ``waiting(held,
    seconds_left)`` first, and embeds the rows whose lease ran out. Stops at a batch of
    which nothing could be embedded (the API failed): the rest would fail alike."""
    deadline = time.monotonic() + wait_s
    done = 0
    lock = _lock(sessions)
    try:
        while True:
            take_over(sessions, user_id)  # a run cut off meanwhile: its rows, during a wait
            done, failed = _fill_free(sessions, embedder, user_id, batch, done, progress, lock)
            held = 0 if failed else count_missing(sessions, user_id, embedder.name, held=True)
            left = deadline - time.monotonic()
            if not held or left <= 0:
                return done
            if waiting is not None:
                waiting(held, left)
            time.sleep(min(HELD_POLL_S, left))
    finally:
        if lock is not None:
            lock.close()  # gives back a batch an error left claimed, when the database answers


def take_over(sessions: sessionmaker[Session], user_id: str) -> int:
    """End the claims on ``user_id``'s rows whose claimer is gone (``claimer.reclaim``): an
    earlier fill cut off from its database, a worker that died. How many rows."""
    with transaction(sessions) as session:
        taken = len(claimer.reclaim(session, user_id))
    if taken:
        log_event(
            logger,
            "index.fill.taken_over",
            logging.WARNING,
            user_id=user_id,
            rows=taken,
            cause="the run or worker that claimed them is gone (its process stopped or its "
            "database connection ended) before its lease ran out",
        )
    return taken


def count_missing(
    sessions: sessionmaker[Session], user_id: str, model: str, *, held: bool | None = None
) -> int:
    """Rows of ``user_id`` without a vector of ``model``: all, or (``held``) those a claim
    holds now, or (``held=False``) those none holds."""
    with sessions() as session:
        return EmbeddingRepository(session, user_id).count_missing(model, held=held)


def _lock(sessions: sessionmaker[Session]) -> claimer.ClaimerLock | None:
    """The fill's own claimer lock, held from now on (None: no engine to connect with,
    the batches rely on their lease)."""
    bind = sessions.kw.get("bind")
    if not isinstance(bind, Engine):
        return None
    lock = claimer.ClaimerLock(partial(claimer.outside_pool, bind))
    lock.open()
    return lock


def _fill_free(
    sessions: sessionmaker[Session],
    embedder: EmbeddingProvider,
    user_id: str,
    batch: int,
    done: int,
    progress: Progress | None,
    lock: claimer.ClaimerLock | None,
) -> tuple[int, bool]:
    """Batches of the rows no claim holds, until none is left: rows embedded so far (from
    ``done``), and whether it stopped at a batch that failed."""
    while True:
        token = None if lock is None else lock.token()
        with transaction(sessions) as session:
            todo, lease = EmbeddingRepository(session, user_id).claim_missing(
                embedder.name, batch, FILL_LEASE_S, token
            )
        if not todo or lease is None:
            return done, False
        if lock is not None and token is not None and lease.claimed_by is None:
            lock.lost()  # the claim found the lock gone: this batch relies on its lease
        try:
            embedded, stored, error = embed_and_store(sessions, embedder, user_id, todo)
        except BaseException:
            with contextlib.suppress(SQLAlchemyError):  # else the lock's end frees them
                _release(sessions, user_id, todo, lease)
            raise
        _release(sessions, user_id, todo, lease)
        if not embedded:
            log_event(logger, "index.fill.failed", logging.WARNING, user_id=user_id, error=error)
            return done, True
        done += stored
        log_event(logger, "index.fill", user_id=user_id, embedded=stored)
        if progress is not None:
            progress(done, done + count_missing(sessions, user_id, embedder.name, held=False))


def _release(
    sessions: sessionmaker[Session], user_id: str, todo: Sequence[StoredChunk], lease: Lease
) -> None:
    """The lease of a batch's rows that got no vector ends now (``release_lease``)."""
    with transaction(sessions) as session:
        EmbeddingRepository(session, user_id).release_lease([c.id for c in todo], lease)
