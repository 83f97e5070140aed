"""Whether any process of the deployment runs the re-embedding worker.

An import with ``embed: background`` stores rows without a vector for the worker. The
workers of all processes on one database share one queue (``retrieval.queue``), so a
replica whose own worker is off (``MEMSTRATA_EMBEDDING_HEAL=false``, as docs/DEPLOY.md
advises for all replicas but one or two) may accept such an import as long as some other
process's worker runs: that one embeds the rows. Refusing there turned a third of a
drill's imports into 400s, which clients do not retry.

A running worker says so with a session-level SHARED advisory lock on one fixed key
(``announce``), taken on its claimer lock's connection (``claimer.ClaimerLock``: no
connection more; the worker takes it when it starts, and again each round after losing
it, the API down or not): it ends with that connection — the worker stopped, its process
killed, its host gone (the session's TCP keepalives) — so a dead worker is not counted.
A worker that cannot take it (the database away) is not counted until it can. Shared, so
any number of workers hold it at once; ``memstrata reindex``'s claimer lock does not take
it (a run ends by itself).
``WorkerPresence`` looks in ``pg_locks`` for it and keeps the answer ``CACHE_S``, so an
import burst costs one look.

Behind a pooler in transaction mode (PgBouncer) the lock stays with the server connection
the pooler keeps after a worker died, as the claimer's does; a pooler that resets its
server connections after each transaction (``server_reset_query_always``) drops it at
once, and replicas without a worker then refuse as before.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from sqlalchemy import Connection, Engine, text

# The advisory lock's first key ("memh"); its second is 0. Apart from the claimers'
# ("mems", ``claimer.LOCK_CLASS``) and the shared lane's classes.
PRESENCE_CLASS = 1_835_363_688
PRESENCE_KEY = 0
# How long a replica without a worker keeps its answer: a worker that stopped is noticed
# within this, and an import burst costs one look at ``pg_locks``.
CACHE_S = 5.0

# The refusal of ``embed: background`` (``BackgroundEmbeddingUnavailableError``, HTTP 400).
NO_WORKER = (
    "embed=background needs the background embedding worker, and no process of this "
    "deployment runs it (this one would need an OpenAI-compatible embedding API and "
    "MEMSTRATA_EMBEDDING_HEAL=true, or another replica on the same database runs it); "
    "send embed=inline"
)

_PARAMS = {"cls": PRESENCE_CLASS, "key": PRESENCE_KEY}


def announce(conn: Connection) -> bool:
    """Take the shared lock on ``conn`` (session-level: commit, and it outlives the
    transaction until the connection ends). Never waits: nobody takes it exclusively."""
    return bool(
        conn.execute(
            text(
                "SELECT pg_try_advisory_lock_shared(CAST(:cls AS integer), CAST(:key AS integer))"
            ),
            _PARAMS,
        ).scalar_one()
    )


def workers_running(conn: Connection) -> bool:
    """Whether any session holds the lock: a worker of some process runs."""
    return bool(
        conn.execute(
            text(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND "
                "classid = CAST(:cls AS integer) AND objid = CAST(:key AS integer) AND "
                "objsubid = 2 AND granted)"
            ),
            _PARAMS,
        ).scalar_one()
    )


class WorkerPresence:
    """``workers_running``, asked at most once per ``cache_s``. Thread-safe."""

    def __init__(
        self,
        engine: Engine,
        *,
        cache_s: float = CACHE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = engine
        self._cache_s = cache_s
        self._clock = clock
        self._mutex = threading.Lock()
        self._answer: tuple[float, bool] | None = None  # (asked at, running)

    def anywhere(self) -> bool:
        """A database error is raised (the request fails as the database's, not as a 400)."""
        with self._mutex:
            now = self._clock()
            if self._answer is not None and now - self._answer[0] < self._cache_s:
                return self._answer[1]
            with self._engine.connect() as conn:
                running = workers_running(conn)
            self._answer = (now, running)
            return running
