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
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
import weakref
from typing import Any

import psycopg
from psycopg import pq
from sqlalchemy import Engine, event


class OpenConnections:
    """The DB-API connections one database's engines have open (gone ones drop out by
    themselves)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: weakref.WeakSet[Any] = weakref.WeakSet()
        # Set while the server is known frozen (the database monitor): the 10 s
        # connect_timeout would hold each request that long, and this is enough to find
        # that the server answers again.
        self.connect_timeout_cap_s: int | None = None

    def add(self, dbapi_connection: Any, _record: object = None) -> None:
        with self._lock:
            self._open.add(dbapi_connection)

    def cap_connect_timeout(
        self, _dialect: object, _record: object, _cargs: object, cparams: dict[str, Any]
    ) -> None:
        cap = self.connect_timeout_cap_s
        if cap is not None:
            cparams["connect_timeout"] = min(int(cparams.get("connect_timeout", cap)), cap)

    def interrupt(self) -> int:
        """Shut down the socket of every open connection; how many were cut."""
        with self._lock:
            connections = list(self._open)
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
    event.listen(engine, "connect", tracker.add)
    event.listen(engine, "do_connect", tracker.cap_connect_timeout)
    return tracker


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
