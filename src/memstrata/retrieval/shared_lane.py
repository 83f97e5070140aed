"""One passage server's lane across processes: a user's single write first, through
PostgreSQL.

``breaker.Lanes`` puts a user's small write ahead of bulk work (imports' chunks, the
re-embedding worker's requests) within one process. Replicas share the passage server but
not their lanes: in a load drill, user A's import on one replica and the workers healing
A's rows held user B's single turns on another replica at 7-9× their idle latency
(docs/BENCHMARKS.md). ``SharedLane`` carries what the lanes need across processes, as
advisory locks keyed by the passage server's URL (``server_key``), each process on one
connection of its own outside the pool (``raw_outside_pool``):

- a user's write of one request (``Lanes``: one that may go express, or a call of one
  passage, ``one_passage_write``: a single turn) about to be sent to the passage server
  holds a shared lock (``priority``, ``PRIORITY_CLASS``) until its answer;
- a bulk request about to be sent (``bulk``) first waits while another process holds that
  lock, or such a write of its own process is in flight, then for the one bulk slot of all
  processes (``BULK_CLASS``, held until its answer; the threads of one process share it,
  within its ``MEMSTRATA_EMBEDDING_BULK_CONCURRENCY``). A request that finds it taken
  says it waits (``WAITER_CLASS``), and a process that has just let the slot go waits
  ``HANDOFF_S`` before it asks again while others wait: the slot goes round the replicas.

So such a write waits at the server for the one bulk request in flight there, never for a
bulk request of any replica sent after it; a request is bounded (``embedding_plan``), so
that wait is. Each wait is polled every ``POLL_S`` (PostgreSQL does not notify an advisory
lock's release); a bulk request yields at most ``YIELD_MOST_S`` to such writes and as long
again for the slot, then goes: a process frozen with a lock held must not stop the other
replicas' imports and healing.

Degrading: every statement is sent from one thread of this process and waited for
``CALL_TIMEOUT_S`` at most. A database that errs or does not answer in time turns the
shared lane off for ``RETRY_S`` (logged once); meanwhile the per-process lanes work as
before, and the locks the lost connection held end with it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from functools import partial
from typing import Any

import psycopg
from sqlalchemy import Engine

from memstrata.logs import log_event

logger = logging.getLogger(__name__)

# The advisory locks' first keys ("meml", "memb"); the claimers' is "mems"
# (``claimer.LOCK_CLASS``), and two-key locks never meet memstrata's one-key ones.
PRIORITY_CLASS = 1_835_363_692
BULK_CLASS = 1_835_363_682
WAITER_CLASS = 1_835_363_703  # "memw"
# How often a bulk request waiting for the others looks again.
POLL_S = 0.02
# A process that let the bulk slot go this recently, finding others waiting for it, waits
# this long before it asks again: theirs come first.
HANDOFF_S = 3 * POLL_S
# A bulk request waits for other processes' small writes, and then for the bulk slot, at
# most this long each; then it goes anyway.
YIELD_MOST_S = 10.0
# A statement of the shared lane answers within this, or the shared lane is off.
CALL_TIMEOUT_S = 1.0
# After the database failed the shared lane, the per-process lanes alone this long.
RETRY_S = 30.0


def _lock(function: str, cls: str) -> str:
    return f"{function}(CAST(%({cls})s AS integer), CAST(%(k)s AS integer))"


# A small write registered (a session's shared lock: many at once), and let go.
_LOCK_PRIORITY = f"SELECT {_lock('pg_try_advisory_lock_shared', 'p')}"
_UNLOCK_PRIORITY = f"SELECT {_lock('pg_advisory_unlock_shared', 'p')}"
# A bulk request of this session waiting for the slot, and no longer.
_LOCK_WAITER = f"SELECT {_lock('pg_try_advisory_lock_shared', 'w')}"
_UNLOCK_WAITER = f"SELECT {_lock('pg_advisory_unlock_shared', 'w')}"
# No other session holds the shared lock of the class: an exclusive lock for the
# statement's own transaction (autocommit) is granted only then; a session's own locks never
# conflict with it.
_NO_PRIORITY = _lock("pg_try_advisory_xact_lock", "p")
_NO_WAITER = _lock("pg_try_advisory_xact_lock", "w")
_SLOT = _lock("pg_try_advisory_lock", "b")
# The bulk slot, one round trip each (CASE evaluates in order): a request that has not
# waited takes it only while no other session's small write is registered nor another
# session's bulk request waits for it (so a replica that just let it go does not take it
# again before the others); one that waits, while no small write is registered; and once
# its wait for the small writes has run out, whenever it is free.
_TAKE_FIRST = (
    f"SELECT CASE WHEN {_NO_PRIORITY} THEN CASE WHEN {_NO_WAITER} THEN {_SLOT} "
    "ELSE false END ELSE false END"
)
_TAKE_WAITING = f"SELECT CASE WHEN {_NO_PRIORITY} THEN {_SLOT} ELSE false END"
_TAKE_SLOT = f"SELECT {_SLOT}"
_UNLOCK_BULK = f"SELECT {_lock('pg_advisory_unlock', 'b')}"


# The driver's connection the shared lane's statements go through (``raw_outside_pool``).
DBConnection = psycopg.Connection[Any]


_one_passage: ContextVar[bool] = ContextVar("memstrata_one_passage", default=False)


@contextmanager
def one_passage_write() -> Iterator[None]:
    """A user's write of one passage (a single turn, a small edit) is made in this block:
    its one request goes first at the passage server of every process (``Lanes``), like a
    small write that may take the express slot, whatever its size up to one chunk."""
    token = _one_passage.set(True)
    try:
        yield
    finally:
        _one_passage.reset(token)


def in_one_passage_write() -> bool:
    return _one_passage.get()


def server_key(url: str) -> int:
    """The advisory lock's second key for a passage server's URL: an int4."""
    key = zlib.crc32(url.encode())
    return key - 2**32 if key >= 2**31 else key


class SharedLane:
    """The cross-process lane of one passage server (module docstring). Thread-safe."""

    def __init__(
        self,
        connect: Callable[[], DBConnection],
        url: str,
        *,
        poll_s: float = POLL_S,
        yield_most_s: float = YIELD_MOST_S,
        call_timeout_s: float = CALL_TIMEOUT_S,
        retry_s: float = RETRY_S,
    ) -> None:
        self._connect = connect
        self.key = server_key(url)
        self._keys = {"p": PRIORITY_CLASS, "b": BULK_CLASS, "w": WAITER_CLASS, "k": self.key}
        self.poll_s = poll_s
        self.yield_most_s = yield_most_s
        self.call_timeout_s = call_timeout_s
        self.retry_s = retry_s
        self._mutex = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._conn: DBConnection | None = None
        self._generation = 0  # a new connection, a new generation: its locks are its own
        self._down_until = 0.0
        self._closed = False
        self._priority = 0  # this process's small writes registered
        self._bulk = 0  # this process's bulk requests holding the bulk slot
        self._bulk_generation = -1
        self._released_at = -math.inf  # when this process last let the bulk slot go
        self._taking = threading.Lock()  # one thread of this process takes the slot

    # -- what the lanes call -------------------------------------------------------------
    @contextmanager
    def priority(self) -> Iterator[None]:
        """Around a small write sent to the passage server: bulk requests of every process
        wait until it is answered."""
        with self._mutex:
            self._priority += 1
        taken = self._try(self._lock_shared)
        try:
            yield
        finally:
            with self._mutex:
                self._priority -= 1
            if taken is not None and taken[1]:
                self._try(partial(self._ask, _UNLOCK_PRIORITY), taken[0], wait=False)

    @contextmanager
    def bulk(self, still_wanted: Callable[[], None]) -> Iterator[None]:
        """Around a bulk request: waits while a small write of any process is registered,
        then for the bulk slot of all processes. ``still_wanted`` is called at every look:
        what it raises ends the wait (a lane closing, a write's deadline)."""
        generation = self._take_bulk(still_wanted)
        try:
            yield
        finally:
            if generation is not None:
                self._drop_bulk(generation)

    def close(self) -> None:
        """Let every lock go (the connection ends) and stop the statements' thread."""
        with self._mutex:
            self._closed = True
            pool, conn, self._pool, self._conn = self._pool, self._conn, None, None
        if pool is not None:
            if conn is not None:
                pool.submit(_close_quietly, conn)
            pool.shutdown(wait=False)

    @property
    def up(self) -> bool:
        """Is the shared lane in use (not turned off by a failing database, nor closed)?"""
        with self._mutex:
            return not self._closed and time.monotonic() >= self._down_until

    # -- the waits -------------------------------------------------------------------------
    def _take_bulk(self, still_wanted: Callable[[], None]) -> int | None:
        """Wait for the small writes, then take the bulk slot: the generation of the
        connection that holds it; None when the shared lane is off or a wait ran out."""
        until = time.monotonic() + self.yield_most_s
        others_only = False  # the small writes' wait ran out: the slot alone now
        waiting: tuple[int, bool] | None = None  # registered as waiting (generation, taken)
        try:
            while True:
                still_wanted()
                with self._taking:
                    with self._mutex:
                        own = self._priority > 0 and not others_only
                        if not own and self._bulk and self._bulk_generation == self._generation:
                            self._bulk += 1  # this process holds the slot: its requests share it
                            return self._bulk_generation
                    if not own:
                        statement = (
                            _TAKE_SLOT if others_only else _TAKE_WAITING if waiting else _TAKE_FIRST
                        )
                        taken = self._try(partial(self._ask, statement))
                        if taken is None:
                            return None
                        if taken[1]:
                            with self._mutex:
                                self._bulk, self._bulk_generation = 1, taken[0]
                            return taken[0]
                        if waiting is None:
                            waiting = self._try(partial(self._ask, _LOCK_WAITER))
                            if time.monotonic() - self._released_at < HANDOFF_S:
                                # This process just had the slot and others wait for it:
                                # they poll first, so the slot goes round the replicas.
                                time.sleep(HANDOFF_S)
                if time.monotonic() >= until:
                    if others_only:
                        return None
                    others_only, until = True, time.monotonic() + self.yield_most_s
                time.sleep(self.poll_s)
        finally:
            if waiting is not None and waiting[1]:
                self._try(partial(self._ask, _UNLOCK_WAITER), waiting[0], wait=False)

    def _drop_bulk(self, generation: int) -> None:
        with self._taking:
            with self._mutex:
                if self._bulk_generation != generation or not self._bulk:
                    return  # the connection that held it is gone, and the lock with it
                self._bulk -= 1
                if self._bulk:
                    return
                self._released_at = time.monotonic()
            self._try(partial(self._ask, _UNLOCK_BULK), generation, wait=False)

    # -- the statements (run on the statements' thread) ------------------------------------
    def _lock_shared(self, conn: DBConnection) -> bool:
        return self._ask(_LOCK_PRIORITY, conn)

    def _ask(self, statement: str, conn: DBConnection) -> bool:
        with conn.cursor() as cursor:
            cursor.execute(statement, self._keys)
            row = cursor.fetchone()
        return bool(row and row[0])

    # -- one statement, bounded --------------------------------------------------------------
    def _try(
        self,
        statement: Callable[[DBConnection], bool],
        generation: int | None = None,
        *,
        wait: bool = True,
    ) -> tuple[int, bool] | None:
        """``statement``'s answer on the shared connection with that connection's
        generation; None when the shared lane is off, or when ``generation`` is given and no
        longer the connection's (its locks went with it). Not ``wait``: sent, not waited
        for (a lock let go: nobody needs its answer, and the next statement comes after it)."""
        pool = self._usable_pool()
        if pool is None:
            return None
        future = pool.submit(self._run, pool, statement, generation)
        if not wait:
            return None
        try:
            return future.result(timeout=self.call_timeout_s)
        except FutureTimeout:
            self._down(pool, f"the database did not answer within {self.call_timeout_s:g} s")
        except Exception as exc:  # whatever it was, the request goes on
            self._down(pool, str(exc).splitlines()[0][:300])
        return None

    def _run(
        self,
        pool: ThreadPoolExecutor,
        statement: Callable[[DBConnection], bool],
        generation: int | None,
    ) -> tuple[int, bool] | None:
        conn = self._conn
        if conn is None:
            if generation is not None:
                return None
            conn = self._connect()
            with self._mutex:
                if self._pool is not pool:  # turned off while it connected
                    _close_quietly(conn)
                    return None
                self._conn = conn
                self._generation += 1
        elif generation is not None and generation != self._generation:
            return None
        return self._generation, statement(conn)

    def _usable_pool(self) -> ThreadPoolExecutor | None:
        with self._mutex:
            if self._closed or time.monotonic() < self._down_until:
                return None
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="memstrata-shared-lane")
            return self._pool

    def _down(self, pool: ThreadPoolExecutor, error: str) -> None:
        with self._mutex:
            if self._pool is not pool:
                return  # another caller turned it off already
            conn, self._pool, self._conn = self._conn, None, None
            self._down_until = time.monotonic() + self.retry_s
            self._bulk = 0
        if conn is not None:
            pool.submit(_close_quietly, conn)  # after the stuck statement, if it ever ends
        pool.shutdown(wait=False)
        log_event(
            logger,
            "embedding.shared_lane.off",
            logging.WARNING,
            error=error,
            effect="small writes are put ahead of bulk work within each process only; "
            f"tried again in {self.retry_s:g} s",
        )


def raw_outside_pool(engine: Engine) -> DBConnection:
    """A driver connection of ``engine`` that its pool forgets, in autocommit: each of the
    shared lane's statements is one round trip, and its locks are the session's."""
    proxied = engine.raw_connection()
    proxied.detach()
    conn = proxied.dbapi_connection
    if not isinstance(conn, psycopg.Connection):  # the engines memstrata makes use psycopg
        proxied.close()
        raise TypeError(f"the shared lane needs a psycopg connection, got {type(conn)}")
    conn.autocommit = True
    return conn


def _close_quietly(conn: DBConnection) -> None:
    with suppress(Exception):  # closing a broken connection: nothing left to do
        conn.close()
