"""Waking the re-embedding workers of other processes when rows are left for them.

A replica whose own worker is off (``MEMSTRATA_EMBEDDING_HEAL=false``) accepts an import
with ``embed: background`` while another process runs a worker (``worker_presence``). That
worker used to find the rows at its next idle round: a 40-turn import had its last vector
after a median of 4.6 s against 2.8 s where the worker is local. Now the replica sends
``NOTIFY memstrata_embed`` once the import has committed (``WorkerWake``: only when no
worker of its own runs, which its own wake reaches), and every running worker listens on
the connection that already holds its claimer lock (``present``: no connection more), so
the notification ends its idle pause as its own process's wake does (``IdleWait``).

A notification is a hint, never the only way rows are found: one sent while no worker
listens (its lock connection being taken again, the database restarting) is lost, and
through a pooler in transaction mode (PgBouncer) LISTEN does not work at all (it lands on
a server connection the pooler hands to other clients). The rows then wait for the
worker's idle round (``MEMSTRATA_EMBEDDING_HEAL_INTERVAL_S``), as before.

The listening connection also tells the worker when it is gone (the database restarted,
the connection cut): the socket turns readable and reading it fails. The worker then
drops its lock (``ClaimerLock.lost``) and takes a new one, announcing itself again; before,
a lock connection lost while the worker was idle went unnoticed until a claim found rows,
and the replicas without a worker refused ``embed: background`` meanwhile.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from typing import Any, Protocol

import psycopg
from sqlalchemy import Connection, Engine, text

from memstrata.logs import log_failure
from memstrata.retrieval import worker_presence
from memstrata.retrieval.claimer import ClaimerLock
from memstrata.retrieval.jobs import KeyedJobs

logger = logging.getLogger(__name__)

CHANNEL = "memstrata_embed"


class Worker(Protocol):
    """The part of ``healing.VectorHealer`` a wake needs."""

    @property
    def running(self) -> bool: ...

    def wake(self) -> None: ...


def present(conn: Connection) -> None:
    """On a worker's new claimer lock connection, before its commit: say a worker runs
    (``worker_presence.announce``) and listen for wakes (LISTEN takes effect at commit)."""
    worker_presence.announce(conn)
    conn.execute(text(f"LISTEN {CHANNEL}"))


class WorkerWake:
    """What a runtime does when rows were stored without a vector (``rows_waiting``): the
    worker of this process looks now; if none runs here, the workers of the other
    processes on the database are told, with a NOTIFY sent on a thread of its own (the
    import does not wait for a connection and a commit), at most one waiting to be sent (a
    burst of imports sends one or two; one sent after a commit covers every commit before
    it). A failure to send is logged, never raised: the rows are committed, and the
    workers' idle rounds find them."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._jobs: KeyedJobs[str, None] = KeyedJobs("memstrata-heal-wake", self._send, _failed)

    def rows_waiting(self, local: Worker | None) -> None:
        """``local``: this process's worker, None where it is off on purpose."""
        if local is not None:
            local.wake()
            if local.running:
                return
        self._jobs.submit(CHANNEL, None)

    def close(self) -> None:
        """Send what is waiting to be sent, and stop the thread (a later wake starts it)."""
        self._jobs.close()

    def _send(self, channel: str, _: None) -> None:
        with self._engine.connect() as conn:
            conn.execute(text("SELECT pg_notify(:channel, '')"), {"channel": channel})
            conn.commit()


def _failed(channel: str, exc: Exception) -> None:
    log_failure(
        logger,
        "embedding.heal.notify_failed",
        exc,
        channel=channel,
        effect="the re-embedding workers of other processes find the rows at their next idle round",
    )


class IdleWait:
    """The worker's pause between rounds, ended by ``set`` (a wake of this process, a stop)
    or by a notification on the connection of ``lock`` (``present`` listens on it; no lock:
    a wake alone), which is dropped (``ClaimerLock.lost``) when reading it fails. Used like
    a ``threading.Event``: ``wait`` by the worker's thread only, ``set`` from any thread."""

    def __init__(self, lock: ClaimerLock | None) -> None:
        self._lock = lock
        self._event = threading.Event()
        self._mutex = threading.Lock()
        # (read end, write end): what ``set`` writes ends a wait on the connection's socket.
        self._pair: tuple[socket.socket, socket.socket] | None = None

    def set(self) -> None:
        self._event.set()
        pair = self._pair
        if pair is not None:
            with contextlib.suppress(OSError):  # full (a wait is due anyway) or closed
                pair[1].send(b"\0")

    def clear(self) -> None:
        """Forget the wakes so far, and the notifications the connection holds (read every
        round, so a worker busy for hours leaves none piling up on the server)."""
        self._event.clear()
        pair = self._pair
        if pair is not None:
            with contextlib.suppress(OSError):
                while pair[0].recv(4096):
                    pass
        conn = self._driver()
        if conn is not None:
            self._heard(conn)

    def wait(self, timeout: float) -> None:
        """Until ``set``, a notification, or ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        conn = self._driver()
        if conn is not None and not self._event.is_set():
            with contextlib.suppress(OSError, ValueError):  # the connection closed meanwhile
                self._watch(conn, deadline)
        self._event.wait(max(0.0, deadline - time.monotonic()))

    def _watch(self, conn: psycopg.Connection[Any], deadline: float) -> None:
        """Wait on the connection's socket and the wake-up together; returns when either
        wakes, at ``deadline``, or once the connection is found gone."""
        pair = self._socketpair()
        with selectors.DefaultSelector() as waiting:
            waiting.register(pair[0], selectors.EVENT_READ)
            waiting.register(conn.fileno(), selectors.EVENT_READ)
            while not self._event.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                for key, _ in waiting.select(left):
                    if key.fileobj is pair[0]:
                        continue
                    heard = self._heard(conn)
                    if heard is None:
                        return  # no longer a connection to watch: the rest on ``set`` alone
                    if heard:
                        self._event.set()

    def close(self) -> None:
        """Close the sockets (the worker stopped); a later ``wait`` opens them again."""
        with self._mutex:
            pair, self._pair = self._pair, None
        if pair is not None:
            for end in pair:
                end.close()

    def _socketpair(self) -> tuple[socket.socket, socket.socket]:
        with self._mutex:
            if self._pair is None:
                pair = socket.socketpair()
                for end in pair:
                    end.setblocking(False)
                self._pair = pair
            return self._pair

    def _driver(self) -> psycopg.Connection[Any] | None:
        conn = None if self._lock is None else self._lock.connection()
        if conn is None:
            return None
        driver = conn.connection.dbapi_connection
        return driver if isinstance(driver, psycopg.Connection) else None

    def _heard(self, conn: psycopg.Connection[Any]) -> bool | None:
        """Whether a notification came (every one waiting is read); None when reading the
        connection fails: it is gone, and the lock with it (``ClaimerLock.lost``, which logs
        ``embedding.heal.claimer_lost``)."""
        try:
            return sum(1 for _ in conn.notifies(timeout=0)) > 0
        except psycopg.Error:
            if self._lock is not None:
                self._lock.lost()
            return None
