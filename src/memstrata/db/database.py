"""Open the configured database: the external URL, or the embedded server."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from memstrata.config import DB_CHECK_INTERVAL_S, Settings, unset_database_problem
from memstrata.db.embedded import EmbeddedPostgres
from memstrata.db.engine import make_engine, make_session_factory
from memstrata.db.migrate import check_ready, ensure_ready
from memstrata.db.monitor import DatabaseMonitor, probe, probe_engine
from memstrata.db.pool_watch import unavailable
from memstrata.errors import DatabaseSetupError, DatabaseUnavailableError, RuntimeClosedError

T = TypeVar("T")


class ClosableSessions(sessionmaker[Session]):
    """``factory``'s sessions (same engine, options and Session class) until :meth:`close`;
    from then on every new session is refused with ``RuntimeClosedError(message)``.

    A runtime hands one to each of its services, so closing the runtime makes each of
    their calls fail with that one typed error before touching the database, while the
    :class:`Database` itself, perhaps the caller's and shared with other runtimes, stays
    usable. Sessions already open are not affected.
    """

    def __init__(self, factory: sessionmaker[Session], message: str) -> None:
        super().__init__(**factory.kw)
        self.class_ = factory.class_  # the factory's own class: its session events apply
        self.message = message
        self.closed = False

    def __call__(self, **local_kw: Any) -> Session:
        if self.closed:
            raise RuntimeClosedError(self.message)
        return super().__call__(**local_kw)

    def close(self) -> None:
        self.closed = True


@dataclass
class Database:
    engine: Engine
    sessions: sessionmaker[Session]
    embedded: EmbeddedPostgres | None = field(default=None)
    check_interval_s: float = DB_CHECK_INTERVAL_S  # ``Settings.db_check_interval_s``

    @classmethod
    def open(cls, settings: Settings, *, migrate: bool = True) -> Database:
        """Connect (starting the embedded server if no URL is set) and check the schema.

        With ``migrate`` the schema is checked: brought to head when
        ``settings.migrate_on_start`` (the default), else required to be at head already
        (replicas; ``memstrata db upgrade`` migrates). A missing pgvector fails loudly.
        """
        problem = unset_database_problem(settings)
        if problem is not None:  # before the embedded server would start in its place
            raise DatabaseSetupError(problem)
        embedded: EmbeddedPostgres | None = None
        url = settings.external_database_url
        if url is None:
            embedded = EmbeddedPostgres(settings.data_dir)
            url = embedded.start()
        engine = make_engine(url, pool_size=settings.db_pool_size)
        db = cls(engine, make_session_factory(engine), embedded, settings.db_check_interval_s)
        if migrate:
            try:
                (ensure_ready if settings.migrate_on_start else check_ready)(engine)
            except BaseException:  # SIGTERM/Ctrl-C mid-migration too: release the server now
                db.close()
                raise
        return db

    @cached_property
    def monitor(self) -> DatabaseMonitor:
        """The background watcher (started by ``Memstrata.start_background``)."""
        return DatabaseMonitor(self.engine, self.embedded, interval_s=self.check_interval_s)

    def _made_monitor(self) -> DatabaseMonitor | None:
        """The monitor if it was ever made (asking ``monitor`` would make one)."""
        made = self.__dict__.get("monitor")
        return made if isinstance(made, DatabaseMonitor) else None

    def up(self) -> bool | None:
        """The background monitor's verdict: reachable (saturated too) or lost; None when
        it is not running (``Memstrata.start_background`` starts it)."""
        monitor = self._made_monitor()
        return None if monitor is None else monitor.up

    def not_accepting(self) -> bool:
        """Whether the running monitor finds the server serving its open connections but
        taking no new ones (its postmaster alone stopped: ``db.not_accepting``)."""
        monitor = self._made_monitor()
        return monitor is not None and monitor.running and monitor.not_accepting

    def refuse_if_lost(self) -> None:
        """Raise ``DatabaseUnavailableError`` while the monitor finds the database lost:
        what would wait for it (a write's next embedding request, whose vector could not be
        stored; a search queued for its index check, which would wait out a frozen
        server's connect timeout) is refused at once, as the API answers any request then
        (503 ``database_unavailable``). Nothing while the monitor does not run. A refusal
        has the monitor check again at once (``DatabaseMonitor.hurry``): the server may be
        back, and until the monitor sees it every such request is refused."""
        monitor = self._made_monitor()
        if monitor is not None and monitor.up is False:
            monitor.hurry()
            raise DatabaseUnavailableError(unavailable(str(monitor.error)))

    def unless_lost(self, read: Callable[[str], T]) -> Callable[[str], T]:
        """``read`` refused at once while the database is lost (``refuse_if_lost``)."""

        def checked(key: str) -> T:
            self.refuse_if_lost()
            return read(key)

        return checked

    @cached_property
    def _probe_engine(self) -> Engine:
        return probe_engine(self.engine)

    def probe(self) -> str | None:
        """None when a new connection answers now, else the reason (smart shutdown too)."""
        return probe(self._probe_engine)

    def close(self) -> None:
        monitor = self._made_monitor()
        if monitor is not None:
            monitor.stop()
        if "_probe_engine" in self.__dict__:
            self._probe_engine.dispose()
        self.engine.dispose()
        if self.embedded is not None:
            self.embedded.stop()
            self.embedded = None
