"""Watching the database: notice a lost or shutting-down server and recover by itself.

A background thread opens a fresh connection (never a pooled one: a smart shutdown keeps
serving existing connections while refusing new ones) every ``interval_s``:

- on failure it logs ``db.lost`` once and disposes the pools (on every failed check) — so
  a smart shutdown is not held up by our idle connections, and the next request
  reconnects — and, when the embedded server's postmaster is gone, restarts it (at most
  ``max_restarts`` times in a row, with a growing pause; every attempt is logged);
- on success after a failure it logs ``db.recovered``;
- a server whose connection slots are all taken (``too many clients``) is not lost: it
  logs ``db.saturated`` once and keeps the pool, whose connections still work.

``up`` is its verdict while the thread runs (``memstrata_database_up`` on ``/metrics``):
False from ``db.lost`` to ``db.recovered``, True otherwise, saturated included.

``/readyz`` does its own fresh-connection probe, so it reports the state within one
request, independent of this thread.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.pool import NullPool

from memstrata.config import DB_CHECK_INTERVAL_S
from memstrata.db.embedded import EmbeddedPostgres
from memstrata.logs import log_event

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 2


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
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        self.saturated = False  # every connection slot of the server taken (db.saturated)
        self.restarts = 0
        # While the database is lost, a connection handed back is closed, not pooled: a
        # smart shutdown waits for every client, and disposing the pool only closes the
        # connections idle at that moment (this listener is copied to recreated pools).
        event.listen(engine, "checkin", self._close_while_lost)

    def _close_while_lost(self, _dbapi_connection: object, record: Any) -> None:
        if self.error is not None and record is not None:
            record.invalidate()

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
        if error is None:
            if self.error is not None:
                log_event(logger, "db.recovered", restarts=self.restarts)
            self.error = None
            self.restarts = 0
            return None
        if self.error is None:
            log_event(logger, "db.lost", logging.WARNING, error=error)
        # Idle pooled connections would hold up a smart shutdown and are dead after a
        # fast one; the next checkout reconnects. On every failed check, not the first
        # only: a pool without the checkin rule (the state reader's) pools connections
        # again while lost — after a restart, before a check has seen it answer — and a
        # smart shutdown begun then waited for them for good.
        self.engine.dispose()
        self.error = error
        if self.embedded is not None and not self.embedded.alive():
            self._restart()
        return error

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
        self._thread = threading.Thread(target=self._loop, name="memstrata-dbmon", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        self._probe.dispose()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s * (1 + min(self.restarts, 5))):
            try:
                self.check_once()
            except Exception:  # never let the watcher die silently
                logger.exception("db.monitor.crashed")
