"""Who holds a re-embedding claim, in a form PostgreSQL can tell is alive.

A claimed row carries a lease (``embedding_claimed_until``) and the claiming worker's
token (``embedding_claimed_by``, migration 0010). The token is the key of a session-level
advisory lock the worker holds, for as long as it runs, on a connection of its own outside
the pool. PostgreSQL drops that lock when the connection ends — the process killed, the
worker stopped, its host gone (the session's TCP keepalives notice within about a minute)
— so another worker tells a dead claimer's rows from a live one's with one look at
``pg_locks`` (``reclaim``, at the start of every round) and takes them at once instead of
after the lease (two minutes, during which ``/readyz`` said ``degraded``). A stopping
worker gives its rows back (``ClaimerLock.close``). It costs one more connection per
running worker, and the idle round about 0.3 ms (docs/RELIABILITY.md).

Why a lock and not the claiming backend's ``pg_backend_pid()``: the claim runs on a pooled
connection, which may close while the process lives (an overflow connection, a recycled
one; its rows would then be taken from a live worker) and whose pid PostgreSQL may later
give to another backend (a dead worker's rows then look alive). The lock lives exactly as
long as the worker's own connection, whatever the pool does.

A claim records the token only if the lock is held as the claim is written (the claim's
statement looks), so a token in a row was alive when the row was claimed, and a token no
longer in ``pg_locks`` is gone for good (a worker that lost its lock takes a new token).

Behind a pooler in transaction mode (PgBouncer) the lock stays with a server connection
the pooler keeps: a dead worker's rows look alive and wait for their lease, as before; and
if the pooler closes that server connection while the worker runs, the worker's current
batch may be embedded a second time by another worker — harmless, since the write-back
skips rows replaced meanwhile. The worker notices at its next claim and takes a new lock.
The same holds, during a rolling upgrade, for a replica of a release before 0010 that
claims a row a dead worker's token is still on: it does not clear the column.

``memstrata reindex`` claims the same way (``retrieval.fill``): while it runs it holds a
lock of its own and records its token with each batch, so a run cut off from its database
(the server restarted, the connection cut) leaves a batch that a rerun, or a worker, takes
at once rather than after the run's 10-minute lease, while the rows of a live worker or of
another running reindex stay theirs.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from memstrata.db.distribution import cross_user_tag
from memstrata.logs import log_event

logger = logging.getLogger(__name__)

# The advisory lock's first key ("mems"). PostgreSQL keeps two-key locks (``objsubid`` 2)
# apart from the one-key locks memstrata takes elsewhere (per user, migrations).
LOCK_CLASS = 1_835_363_699
# Tokens are drawn from 1 .. 2**31 - 1: ``objid`` holds them as oids, an int4 column as ints.
TOKEN_MAX = 2**31 - 1
# ``embedding_claimed_by`` of a retry pause: rows a worker gave back without a vector (the
# API was down or refused the whole claim, or their text failed once), unclaimable until
# ``embedding_claimed_until`` so no worker asks the API for them again at once. Never a
# token, so a pause is told from a claim: no worker is embedding those rows, ``reclaim``
# leaves the pause to run out, and ``memstrata reindex`` takes them (``queue.HELD``) — a
# pause spares the API the workers' retries, it protects nothing an operator's explicit
# re-embedding must wait for.
PAUSED = 0
# A token another live worker holds is drawn again, at most this many times.
TAKE_ATTEMPTS = 4
# After a failed or lost lock, the worker claims on its lease alone this long before it
# tries again (a pooler that drops the lock after every statement must not cost a new
# connection every round).
RETAKE_S = 30.0
# A stopping worker gives its rows back within this (then the lock's end does it).
GIVE_BACK_TIMEOUT_MS = 2000
# The server's keepalives for the lock's session: a host that vanishes without closing its
# connections (a node lost) lets its lock go in about a minute, half the lease; the
# operating system's default is two hours. Ignored on a Unix socket.
KEEPALIVE_SQL = (
    "SELECT set_config('tcp_keepalives_idle', '30', false),"
    " set_config('tcp_keepalives_interval', '10', false),"
    " set_config('tcp_keepalives_count', '3', false)"
)


def new_token() -> int:
    return secrets.randbelow(TOKEN_MAX) + 1


def outside_pool(engine: Engine) -> Connection:
    """A connection of ``engine`` that its pool forgets: closing it closes it (and ends the
    session's locks), and it does not count against the pool's size."""
    conn = engine.connect()
    conn.detach()
    return conn


class ClaimerLock:
    """One worker's token and the connection that holds its lock. Thread-safe: the
    worker's thread takes the token, ``close`` may come from another thread."""

    def __init__(
        self,
        connect: Callable[[], Connection],
        clock: Callable[[], float] = time.monotonic,
        *,
        also: Callable[[Connection], object] | None = None,
    ) -> None:
        self._connect = connect  # a connection outside the pool (see ``Connection.detach``)
        self._clock = clock
        # Run on each new lock connection before its first commit: a worker's
        # ``worker_presence.announce``, a lock that lives and ends with this one.
        self._also = also
        self._mutex = threading.Lock()
        self._conn: Connection | None = None
        self._token: int | None = None
        self._wanted = False
        self._next_take = 0.0
        self._taken_at = 0.0

    def open(self) -> None:
        """From now on :meth:`token` holds a lock (the worker runs)."""
        with self._mutex:
            self._wanted = True
            self._next_take = 0.0

    def token(self) -> int | None:
        """The token to record with the next claim, taking the lock when none is held; None
        while closed or when the lock cannot be held (the claims rely on their lease)."""
        with self._mutex:
            if not self._wanted:
                return None
            if self._token is None and self._clock() >= self._next_take:
                self._take()
            return self._token

    def held(self) -> int | None:
        """The token held now, without taking one."""
        return self._token

    def connection(self) -> Connection | None:
        """The connection holding the lock now (a worker listens on it: ``heal_wake``)."""
        return self._conn

    def lost(self) -> None:
        """A claim found the lock gone (the connection ended, a pooler reset it): drop the
        connection; a new token is taken at the next round when the lock had been held for
        ``RETAKE_S`` or more (the database restarted, the connection was cut: after each
        restart the rows relied on their lease for 30 s more), else after ``RETAKE_S`` (a
        pooler that drops the lock after every statement)."""
        with self._mutex:
            token = self._token
            self._drop()
            now = self._clock()
            pause = RETAKE_S if now - self._taken_at < RETAKE_S else 0.0
            self._next_take = now + pause
        log_event(
            logger,
            "embedding.heal.claimer_lost",
            logging.WARNING,
            token=token,
            effect="this worker's claims rely on their lease until it holds a lock again; "
            f"it tries again in {pause:.0f} s",
        )

    def close(self) -> int:
        """The worker stopped: give back the rows it holds and let the lock go, so other
        workers take them at once (a batch still being embedded too: its write-back, if it
        comes, skips rows replaced meanwhile). Returns how many rows were given back."""
        with self._mutex:
            self._wanted = False
            conn, token = self._conn, self._token
            given = 0
            if conn is not None and token is not None:
                try:
                    # Bounded: a table locked by a migration must not hold up a shutdown.
                    conn.execute(text(f"SET LOCAL statement_timeout = {GIVE_BACK_TIMEOUT_MS}"))
                    given = give_back(conn, token)
                    conn.commit()
                except SQLAlchemyError as exc:  # the lock's end lets other workers in anyway
                    log_event(
                        logger, "embedding.heal.give_back_failed", logging.WARNING, error=str(exc)
                    )
            self._drop()
            return given

    def _take(self) -> None:
        try:
            conn = self._connect()
        except SQLAlchemyError as exc:
            self._failed(exc)
            return
        try:
            conn.execute(text(KEEPALIVE_SQL))
            for _ in range(TAKE_ATTEMPTS):
                token = new_token()
                taken = conn.execute(
                    text(
                        "SELECT pg_try_advisory_lock(CAST(:cls AS integer), "
                        "CAST(:token AS integer))"
                    ),
                    {"cls": LOCK_CLASS, "token": token},
                ).scalar_one()
                if taken:
                    if self._also is not None:
                        self._also(conn)
                    conn.commit()  # the lock is the session's: it outlives the transaction
                    self._conn, self._token = conn, token
                    self._taken_at = self._clock()
                    return
        except SQLAlchemyError as exc:
            conn.close()
            self._failed(exc)
            return
        conn.close()  # every token drawn was held: astronomically unlikely
        self._failed(None)

    def _failed(self, error: Exception | None) -> None:
        self._next_take = self._clock() + RETAKE_S
        log_event(
            logger,
            "embedding.heal.claimer_unavailable",
            logging.WARNING,
            error=None if error is None else str(error).splitlines()[0][:300],
            effect="this worker's claims rely on their lease (a crash leaves its rows to "
            f"other workers after the lease); it tries again in {RETAKE_S:.0f} s",
        )

    def _drop(self) -> None:
        conn, self._conn, self._token = self._conn, None, None
        if conn is not None:
            # Detached: really closed, and the lock with it (a broken one had lost it already).
            with contextlib.suppress(SQLAlchemyError):
                conn.close()


# -- the statements that read the tokens (cross-user, like every re-embedding queue one) ----

# The tokens of the claimers alive now (parameter ``:cls``, ``LOCK_CLASS``).
LIVE_CLAIMERS = (
    "SELECT objid::integer FROM pg_locks WHERE locktype = 'advisory' AND classid = "
    "CAST(:cls AS integer) AND objsubid = 2 AND granted"
)


def claimed_by_sql(claimer: int | None) -> str:
    """A claim's ``embedding_claimed_by`` (parameters ``:claimer``, ``:cls``): the token
    only while its lock is held, so a token found in a row was alive when the row was
    claimed (``reclaim`` relies on it)."""
    if claimer is None:
        return "NULL"
    return (
        f"CASE WHEN CAST(:claimer AS integer) IN ({LIVE_CLAIMERS}) "
        "THEN CAST(:claimer AS integer) END"
    )


def reclaim(session: Session, user_id: str | None = None) -> list[str]:
    """Cross-user (or ``user_id``'s rows only): end the claims of claimers that are gone
    — a token whose advisory lock PostgreSQL no longer holds — so their rows are claimable
    now rather than when the lease ends; returns the user of each row taken back. The
    tokens are read from the rows (the statement's snapshot) before ``pg_locks`` is, so a
    token missing there was held when its row was claimed (``claimed_by_sql``) and has been
    let go since: a live claimer's claim is never ended. A claimer is a worker, or a
    ``memstrata reindex`` (``retrieval.fill``), whose run cut off from its database left its
    batch claimed. Reads the claimed rows only (a partial index, migration 0010); rows
    another transaction holds are skipped, never waited for."""
    scope = "" if user_id is None else " AND user_id = :u"
    return list(
        session.execute(
            text(
                cross_user_tag("embedding_queue.claim")
                + " WITH gone AS (SELECT DISTINCT embedding_claimed_by AS token FROM "
                "memory_embeddings WHERE embedding_claimed_by IS NOT NULL AND "
                f"embedding_claimed_by <> {PAUSED}{scope} EXCEPT {LIVE_CLAIMERS}) "
                "UPDATE memory_embeddings SET embedding_claimed_until = NULL, "
                "embedding_claimed_by = NULL WHERE id IN (SELECT id FROM memory_embeddings "
                "WHERE embedding_claimed_by IS NOT NULL AND embedding_claimed_by IN "
                f"(SELECT token FROM gone){scope} FOR UPDATE SKIP LOCKED) RETURNING user_id"
            ),
            {"cls": LOCK_CLASS, "u": user_id},
        ).scalars()
    )


def give_back(conn: Connection, claimer: int) -> int:
    """Cross-user: the rows ``claimer`` holds (lease running), claimable again at once —
    a stopping worker's, whatever batch it was in. How many."""
    return len(
        conn.execute(
            text(
                cross_user_tag("embedding_queue.release")
                + " UPDATE memory_embeddings SET embedding_claimed_until = NULL, "
                "embedding_claimed_by = NULL WHERE embedding_claimed_by = "
                "CAST(:claimer AS integer) AND embedding_claimed_until > now() RETURNING id"
            ),
            {"claimer": claimer},
        ).all()
    )
