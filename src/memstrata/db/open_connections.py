"""Cutting off the connections of a frozen database server, and asking one of them whether
the server still answers.

A server whose processes are stopped (SIGSTOP, a VM paused, a storage stall that blocks
every backend) leaves each open connection waiting for an answer for as long as the freeze
lasts: the kernel still acknowledges the packets, so neither TCP keepalives nor libpq's
``tcp_user_timeout`` fire, and ``statement_timeout`` is the stopped backend's own to
enforce. A request holding such a connection hung for the whole freeze (603 s in a drill).
When the database monitor finds the server frozen it shuts down these connections'
sockets; each blocked call then fails at once with ``OperationalError``, which the API
answers with 503 ``database_unavailable``, and PostgreSQL rolls the transaction back once
it runs again.

Every connection an engine opens is tracked, not only those checked out: one in its
pool's pre-ping is not yet checked out, and hangs the same. So are those of a pool of its
own next to the engine's (the check before every search, ``retrieval.state_reader``),
with the engine's: a search waiting on that check hung for the whole freeze too. While the
server is known frozen, a new connection of any of them waits for it only briefly.

A connection being opened has no socket to cut yet (libpq's is inside the driver's
connect call), and one begun before the monitor found the server frozen waited out its
whole ``connect_timeout`` (10 s; 45 requests in a freeze: median 10.1 s, at most 12.2 s).
So each is opened on a thread of its own, and the request's thread stops waiting for it
as soon as the server is known frozen: it fails like a cut connection, and the attempt,
left behind, closes what it gets, if anything, when its own timeout ends.

While the server is known frozen a new connection is refused at once
(``CheckoutRefusedError``, the monitor's words) and has the monitor check again
(``on_refusal``): opened, it waited 2 s for nothing. A write whose pooled connection was
cut off in its pre-ping was given a new one that way, and each later step of a request
in flight too (a turn 2 s, a file's write 2 s per step after its commit); once the server
runs again, the monitor's check sees it within a hurried check, as a refusal asks for.
What a statement cut off raises says so (:mod:`memstrata.db.in_flight`).

The tracker also holds the gate of its engines' pools (``db.pool_watch.CheckoutGate``),
which the monitor closes while the database is lost: a checkout waiting for one of their
connections gives up then.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import pq
from sqlalchemy import Engine, event

from memstrata.db.in_flight import watch_in_flight
from memstrata.db.pool_watch import CheckoutGate, CheckoutRefusedError, WatchedPool, unavailable


class OpenConnections:
    """The DB-API connections one database's engines have open (gone ones drop out by
    themselves)."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._open: weakref.WeakSet[Any] = weakref.WeakSet()
        # Cut already, with the monitor's error then: a later check of the same freeze
        # finds them still open (psycopg learns of the cut only when it next uses one) and
        # logged db.interrupted again; and what a cut statement raises names the cause.
        self._cut: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._frozen = False
        self.gate = CheckoutGate()
        # Called on each connection refused while frozen (the monitor's ``hurry``).
        self.on_refusal: Callable[[], None] | None = None

    @property
    def frozen(self) -> bool:
        """Set while the database monitor finds the server frozen: connections being opened
        are given up and new ones refused."""
        return self._frozen

    @frozen.setter
    def frozen(self, frozen: bool) -> None:
        with self._lock:
            self._frozen = frozen
            self._lock.notify_all()  # the connections being opened stop waiting

    def add(self, dbapi_connection: Any, _record: object = None) -> None:
        with self._lock:
            self._open.add(dbapi_connection)

    def connect(
        self, dialect: Any, _record: object, cargs: list[Any], cparams: dict[str, Any]
    ) -> Any:
        """The engine's ``do_connect``: a new connection, given up on once the server is
        known frozen (:class:`Attempt`); refused at once while it is."""
        if self._frozen:
            if self.on_refusal is not None:
                self.on_refusal()
            raise CheckoutRefusedError(unavailable(self.gate.error or "the server is frozen"))
        attempt = Attempt(dialect, cargs, cparams, self._lock)
        with self._lock:
            try:
                while attempt.pending and not self._frozen:
                    self._lock.wait()
            finally:
                abandoned, attempt.pending = attempt.pending, False  # it closes what it gets
        if abandoned:
            raise psycopg.OperationalError(
                "connection abandoned: the database server is frozen (db.lost)"
            )
        if attempt.error is not None:
            raise attempt.error
        return attempt.connection

    def cut_because(self, dbapi_connection: Any) -> str | None:
        """The monitor's error when it cut this connection off, else None."""
        with self._lock:
            return self._cut.get(dbapi_connection)

    def interrupt(self, error: str) -> int:
        """Shut down the socket of every open connection not cut before (the monitor's
        ``error`` the cause); how many were."""
        with self._lock:
            connections = [c for c in self._open if c not in self._cut]
            for conn in connections:
                self._cut[conn] = error
        return sum(shut_down(conn) for conn in connections)


_tracked: weakref.WeakKeyDictionary[Engine, OpenConnections] = weakref.WeakKeyDictionary()
_tracked_lock = threading.Lock()


def track(engine: Engine, *, alongside: Engine | None = None) -> OpenConnections:
    """The tracker of ``engine``'s connections, made (and hooked to it) on first call; its
    listeners are copied to the pools a disposal puts in place. ``alongside``: an engine on
    the same database whose tracker takes ``engine``'s connections too, so that what cuts
    off that engine's connections (its database monitor) cuts off these as well."""
    with _tracked_lock:
        tracker = _tracked.get(engine)
        if tracker is None:
            owner = engine if alongside is None else alongside
            tracker = _tracked.get(owner)
            if tracker is None:
                tracker = _hooked(owner, OpenConnections())
            if owner is not engine:
                _hooked(engine, tracker)
        return tracker


def _hooked(engine: Engine, tracker: OpenConnections) -> OpenConnections:
    _tracked[engine] = tracker
    if isinstance(engine.pool, WatchedPool):  # its recreations keep the gate
        engine.pool.guard(tracker.gate)
    event.listen(engine, "connect", tracker.add)
    event.listen(engine, "do_connect", tracker.connect)
    watch_in_flight(engine, tracker.cut_because)
    return tracker


class Attempt:
    """``dialect.connect(*cargs, **cparams)`` on a thread of its own, started at once; it
    notifies ``done`` when it ends, and closes the connection it got if nobody waits for it
    any more (``pending`` turned False by the waiter)."""

    def __init__(
        self, dialect: Any, cargs: list[Any], cparams: dict[str, Any], done: threading.Condition
    ) -> None:
        self.pending = True
        self.connection: Any = None
        self.error: BaseException | None = None
        self._done = done
        threading.Thread(
            target=self._run,
            args=(dialect, cargs, cparams),
            name="memstrata-db-connect",
            daemon=True,  # ends within its connect_timeout anyway
        ).start()

    def _run(self, dialect: Any, cargs: list[Any], cparams: dict[str, Any]) -> None:
        connection: Any = None
        error: BaseException | None = None
        try:
            connection = dialect.connect(*cargs, **cparams)
        except BaseException as exc:  # the waiter raises it as its own
            error = exc
        with self._done:
            abandoned = not self.pending
            self.connection, self.error, self.pending = connection, error, False
            self._done.notify_all()
        if abandoned and connection is not None:
            connection.close()


def shut_down(dbapi_connection: Any) -> bool:
    """Shut down a psycopg connection's socket both ways, on a duplicate of its descriptor:
    psycopg still owns the descriptor and closes it when the connection is dropped (closing
    it here could close another file that took the number)."""
    pgconn = getattr(dbapi_connection, "pgconn", None)
    if pgconn is None or dbapi_connection.closed:
        return False
    try:
        fd = os.dup(pgconn.socket)
    except (psycopg.Error, OSError):
        return False
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        os.close(fd)
        return False
    with sock:
        # psycopg marks a connection closed before libpq closes its descriptor: open after
        # the dup, the duplicate is of this connection's socket, not a reused number's.
        if dbapi_connection.closed:
            return False
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # already disconnected
            return False
    return True


def answers(dbapi_connection: Any, timeout_s: float) -> bool:
    """Whether ``SELECT 1`` on this open psycopg connection answers within ``timeout_s``
    (libpq's own calls would wait for good on a stopped server)."""
    try:
        pgconn = dbapi_connection.pgconn
        pgconn.send_query(b"SELECT 1")
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            # poll, not select: select refuses a descriptor above 1023, which a process
            # with many files open gives its connections (read as a silent server).
            poller = select.poll()
            poller.register(pgconn.socket, select.POLLIN)
            if not poller.poll(max(1, int(remaining * 1000))):
                return False
            pgconn.consume_input()
            if not pgconn.is_busy():
                break
        ok = True
        while (result := pgconn.get_result()) is not None:
            ok = ok and result.status == pq.ExecStatus.TUPLES_OK
        return ok
    except (psycopg.Error, OSError, ValueError):
        return False
