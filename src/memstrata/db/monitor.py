"""Watching the database: notice a lost or shutting-down server and recover by itself.

A background thread opens a fresh connection (never a pooled one: a smart shutdown keeps
serving existing connections while refusing new ones) every ``interval_s``:

- on failure it logs ``db.lost`` once and disposes the pools (on every failed check) — so
  a smart shutdown is not held up by our idle connections, and the next request
  reconnects — and, when the embedded server's postmaster is gone, restarts it (at most
  ``max_restarts`` times in a row, with a growing pause; every attempt is logged);
- on success after a failure it logs ``db.recovered``;
- a server whose connection slots are all taken (``too many clients``) is not lost: it
  logs ``db.saturated`` once and keeps the pool, whose connections still work;
- a new connection that times out is asked of an open one (the monitor keeps one, the
  sentinel): answered, the server takes no new connections but serves its open ones (its
  postmaster alone stopped), so it logs ``db.not_accepting`` once and keeps the pool;
  unanswered too, the server is frozen: ``db.lost``, and the sockets of every connection
  the engine has open, and the search check's pool next to it, are shut down
  (``db.interrupted``, :mod:`memstrata.db.open_connections`) so that the requests waiting
  on them get a 503 now instead of when the freeze ends (once per freeze; a COMMIT cut
  off says its outcome is unknown, :mod:`memstrata.db.in_flight`); connections being
  opened are given up, and new ones of both refused at once (each a ``hurry``) until the
  database answers again;
- from ``db.lost`` to ``db.recovered`` the pools' gate is closed (``db.pool_watch``): a
  checkout waiting for a pooled connection gives up at once, as a refusal does;
- while the database is lost, a refusal (``Database.refuse_if_lost``) or a new connection
  the engine opened has it check again at once (``hurry``), at most every
  ``HURRY_FLOOR_S``, instead of after its interval: until that check, every search and
  write was refused for up to an interval after the server was back.

``up`` is its verdict while the thread runs (``memstrata_database_up`` on ``/metrics``):
False from ``db.lost`` to ``db.recovered``, True otherwise, saturated included; while it is
False, a write's next embedding request and a search's index check are refused at once
(``Database.refuse_if_lost``).

``/readyz`` does its own fresh-connection probe, so it reports the state within one
request, independent of this thread — except that a probe timing out while this thread
finds the server ``not_accepting`` is ready, as requests on the pool are served.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.pool import NullPool, PoolProxiedConnection

from memstrata.config import DB_CHECK_INTERVAL_S
from memstrata.db.embedded import EmbeddedPostgres
from memstrata.db.open_connections import answers, track
from memstrata.logs import log_event

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 2
# The shortest pause between two checks a hurry may bring about: requests refused by a
# server that refuses connections at once would otherwise have it probe without pause.
HURRY_FLOOR_S = 0.1


def probe_engine(engine: Engine) -> Engine:
    """An engine on the same URL that opens a new connection for every use."""
    return create_engine(
        engine.url, poolclass=NullPool, connect_args={"connect_timeout": PROBE_TIMEOUT_S}
    )


# SQLSTATE too_many_connections, and the server's words for it (a connection refused at
# start-up may carry no SQLSTATE in the driver's error): max_connections, the reserved
# slots, and a role's or database's CONNECTION LIMIT ("too many connections for role").
TOO_MANY_CONNECTIONS = "53300"
_SATURATED_WORDS = (
    "too many clients already",
    "remaining connection slots are reserved",
    "too many connections for ",
)


def probe(engine: Engine) -> str | None:
    """None when a fresh connection answers, else why not."""
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:  # any failure means "not reachable"
        orig = getattr(exc, "orig", exc)
        reason = str(orig).strip().splitlines()[0][:300]
        if getattr(orig, "sqlstate", None) == TOO_MANY_CONNECTIONS and not saturated(reason):
            reason = f"{reason} (too many connections)"
        return reason
    return None


# psycopg's words when connect_timeout passed: the server took the TCP connection (or its
# kernel did) and never answered.
_TIMED_OUT_WORDS = "timeout expired"


def timed_out(reason: str) -> bool:
    return _TIMED_OUT_WORDS in reason


def saturated(reason: str) -> bool:
    """The server is up but every connection slot is taken: it refuses new connections
    only, and the ones already open (the pool's) still work."""
    return any(words in reason for words in (*_SATURATED_WORDS, "(too many connections)"))


class DatabaseMonitor:
    def __init__(
        self,
        engine: Engine,
        embedded: EmbeddedPostgres | None = None,
        *,
        interval_s: float = DB_CHECK_INTERVAL_S,
        max_restarts: int = 5,
    ) -> None:
        self.engine = engine
        self.embedded = embedded
        self.interval_s = interval_s
        self.max_restarts = max_restarts
        self._probe = probe_engine(engine)
        self._stop = threading.Event()
        self._hurry = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        self.saturated = False  # every connection slot of the server taken (db.saturated)
        self.not_accepting = False  # new connections time out, open ones answer
        self._sentinel: PoolProxiedConnection | None = None
        self._open = track(engine)
        self._open.on_refusal = self.hurry  # a refused connection: the server may be back
        self.restarts = 0
        # While the database is lost, a connection handed back is closed, not pooled: a
        # smart shutdown waits for every client, and disposing the pool only closes the
        # connections idle at that moment (this listener is copied to recreated pools).
        event.listen(engine, "checkin", self._close_while_lost)
        # A connection opened while lost: the server answers again.
        event.listen(engine, "connect", self._connected)

    @property
    def frozen(self) -> bool:
        """Lost by a timeout that the sentinel did not answer either."""
        return self._open.frozen

    def _set_frozen(self, frozen: bool) -> None:
        # On the tracker: new connections of every engine it tracks (the search check's
        # pool too) are then refused.
        self._open.frozen = frozen

    def _close_while_lost(self, _dbapi_connection: object, record: Any) -> None:
        if self.error is not None and record is not None:
            record.invalidate()

    def _connected(self, _dbapi_connection: object, _record: object) -> None:
        self.hurry()

    def hurry(self) -> None:
        """While the database is lost, check again without waiting out the interval (not
        while the embedded server is being restarted: its pauses grow on purpose)."""
        if self.error is not None and self.restarts == 0:
            self._hurry.set()

    def check_once(self) -> str | None:
        error = probe(self._probe)
        if error is not None and saturated(error):
            # Not lost: disposing the pool then closed the connections that still worked,
            # and every request, needing a new one, got a 503 until slots freed up.
            if not self.saturated:
                log_event(logger, "db.saturated", logging.WARNING, error=error)
            self.saturated = True
            return None
        self.saturated = False
        if error is not None and timed_out(error) and self._sentinel_answers():
            # The postmaster does not answer but the backends do: disposing the pool then
            # closed the connections that still worked, and 27 of 30 requests of a drill
            # got a 503 after 20–24 s.
            if not self.not_accepting:
                log_event(logger, "db.not_accepting", logging.WARNING, error=error)
            self.not_accepting = True
            return None
        self.not_accepting = False
        if error is None:
            if self.error is not None:
                log_event(logger, "db.recovered", restarts=self.restarts)
            self.error = None
            self._open.gate.open()
            self._set_frozen(False)
            self.restarts = 0
            self._open_sentinel()
            return None
        if self.error is None:
            log_event(logger, "db.lost", logging.WARNING, error=error)
        # Open, it would hold up a smart shutdown; after a fast one it is dead.
        self._close_sentinel()
        # Idle pooled connections would hold up a smart shutdown and are dead after a
        # fast one; the next checkout reconnects. On every failed check, not the first
        # only: a pool without the checkin rule (the state reader's) pools connections
        # again while lost — after a restart, before a check has seen it answer — and a
        # smart shutdown begun then waited for them for good.
        self.engine.dispose()
        self.error = error
        self._open.gate.close(error)  # the pools' waiting checkouts give up
        self._set_frozen(timed_out(error))
        if self.frozen:
            # Only connections in use are left after the disposal, each waiting on the
            # frozen server (a refused or shutting-down one answers them itself).
            cut = self._open.interrupt(error)
            if cut:
                log_event(logger, "db.interrupted", logging.WARNING, connections=cut, error=error)
        if self.embedded is not None and not self.embedded.alive():
            self._restart()
        return error

    def _sentinel_answers(self) -> bool:
        sentinel = self._sentinel
        if sentinel is None:
            return False
        if answers(sentinel.dbapi_connection, PROBE_TIMEOUT_S):
            return True
        self._close_sentinel()
        return False

    def _open_sentinel(self) -> None:
        if self._sentinel is None:
            try:
                self._sentinel = self._probe.raw_connection()
            except Exception:  # no slot free, or gone again: the next check tries anew
                self._sentinel = None

    def _close_sentinel(self) -> None:
        sentinel, self._sentinel = self._sentinel, None
        if sentinel is not None:
            sentinel.invalidate()  # not reused: NullPool closes it either way

    def _restart(self) -> None:
        assert self.embedded is not None
        if self.restarts >= self.max_restarts:
            if self.restarts == self.max_restarts:
                log_event(
                    logger,
                    "db.embedded.gave_up",
                    logging.ERROR,
                    attempts=self.restarts,
                    hint="restart memstrata; see the server log in pgdata/log",
                )
                self.restarts += 1
            return
        self.restarts += 1
        log_event(logger, "db.embedded.restart", logging.WARNING, attempt=self.restarts)
        if self.embedded.restart():
            self.engine.dispose()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def up(self) -> bool | None:
        """Whether the database answered the last check (None: the thread does not run,
        so nothing is checked)."""
        return self.error is None if self.running else None

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self._hurry.clear()
        self._thread = threading.Thread(target=self._loop, name="memstrata-dbmon", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._hurry.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        # Nothing watches any more, so nothing reopens the gate or takes new connections
        # again: its word no longer holds (``up`` is None, and ``Database.refuse_if_lost``
        # refuses nothing either).
        self._open.gate.open()
        self._set_frozen(False)
        self._close_sentinel()
        self._probe.dispose()

    def _loop(self) -> None:
        self._open_sentinel()  # a freeze before the first check is told apart too
        while True:
            pause = self.interval_s * (1 + min(self.restarts, 5))
            floor = min(pause, HURRY_FLOOR_S)
            if self._stop.wait(floor):
                return
            self._hurry.wait(pause - floor)
            if self._stop.is_set():
                return
            self._hurry.clear()  # a hurry during the check asks for the next one
            try:
                self.check_once()
            except Exception:  # never let the watcher die silently
                logger.exception("db.monitor.crashed")
