"""The check before every search — is the user's cached index current? — on a small
autocommit pool of its own, one statement on a plain DB-API cursor.

Through an ORM session on the main pool it cost two round trips (the pool's pre-ping, then
the read); this is one round trip, ~1 ms off a search's p50 and 0.8 ms less CPU per search
(docs/BENCHMARKS.md, "BLAS threads"). The pool has no pre-ping, so a pooled connection may
be dead (PostgreSQL restarted, a network drop): that connection is dropped and the read
tried once more on a fresh one — what the pre-ping did first. Driver errors come out as
SQLAlchemy's (``OperationalError`` …), which the API answers with 503 as before.

One reader per engine, shared by every ``IndexCache`` on it, on the engine's URL and
connection arguments (so ``sslmode`` and the other options of ``MEMSTRATA_DATABASE_URL``
apply), and disposed whenever that engine is: ``Database.close`` (a runtime's close), and
the database monitor's disposal when PostgreSQL is lost; its connections are cut off with
the engine's when the server freezes (``db.open_connections``). The runtime, which builds the
cache over its database, hands the cache its engine's reader (``state_reader``), refused
once the runtime is closed (``while_open``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from memstrata.db.engine import POOL_TIMEOUT_S, connect_args
from memstrata.db.open_connections import track
from memstrata.db.pool_watch import WatchedPool
from memstrata.errors import RuntimeClosedError
from memstrata.memory.kinds import validate_user_id
from memstrata.retrieval.records import IndexState

if TYPE_CHECKING:
    from memstrata.db.database import ClosableSessions

# The check itself, as the cache calls it: a user's state by user id.
StateSource = Callable[[str], IndexState]

_STATE_SQL = (
    "SELECT generation, removals, counted_writes FROM memory_index_state WHERE user_id = %s"
)
# Connections per process for the check (docs/DEPLOY.md counts them): a search holds one
# for a single round trip (~1 ms), so two serve the usual few concurrent searches; a burst
# gets two more, then waits its turn, which is quicker than opening a connection.
POOL_SIZE = 2
POOL_OVERFLOW = 2


def read_state(cursor: Any, user_id: str) -> IndexState:
    """The user's generation and counts (zeros before the first write) through a DB-API
    ``cursor``: the repository's ``state()``, scoped to that one user the same way."""
    cursor.execute(_STATE_SQL, (validate_user_id(user_id),))
    found = cursor.fetchone()
    return IndexState(*(int(v) for v in found)) if found is not None else IndexState(0, 0, 0)


class StateReader:
    """``read_state`` on a pool of its own next to ``engine``'s."""

    def __init__(self, engine: Engine) -> None:
        url = engine.url
        self.engine = create_engine(
            url,
            poolclass=WatchedPool,  # on /metrics as pool="search_check" (db.pool_watch)
            pool_size=POOL_SIZE,
            max_overflow=POOL_OVERFLOW,
            pool_timeout=POOL_TIMEOUT_S,
            pool_pre_ping=False,  # the retry below instead: one round trip, not two
            isolation_level="AUTOCOMMIT",  # no BEGIN/ROLLBACK around the one statement
            connect_args=connect_args(url.render_as_string(hide_password=False)),
            hide_parameters=True,  # user ids stay out of error messages, as on the main pool
        )
        # Its connections cut off with the engine's when the database monitor finds the
        # server frozen: a search waiting on the check would otherwise wait out the freeze.
        track(self.engine, alongside=engine)
        # Disposals so far: a connection checked out before one and handed back after it
        # is closed, not pooled. The database monitor disposes the pools when PostgreSQL is
        # lost, so that a smart shutdown is not held up by idle connections; disposal only
        # closes those idle at that moment, and a search in flight would otherwise put its
        # connection back and hold the shutdown up (the main pool has the same rule).
        self._disposals = 0

    def read(self, user_id: str) -> IndexState:
        dialect = self.engine.dialect
        error = dialect.loaded_dbapi.Error
        for attempt in (1, 2):
            disposals = self._disposals
            try:
                conn = self.engine.raw_connection()
            except error as exc:  # no connection at all: a retry would not find one either
                raise _wrapped(exc, user_id, error, gone=False) from exc
            try:
                cursor = conn.cursor()
                try:
                    return read_state(cursor, user_id)
                finally:
                    cursor.close()
            except error as exc:
                gone = dialect.is_disconnect(exc, conn.dbapi_connection, None)
                if gone:
                    conn.invalidate(exc)  # closed, not handed back to the pool
                if not gone or attempt == 2:
                    raise _wrapped(exc, user_id, error, gone=gone) from exc
            finally:
                if self._disposals != disposals and conn.dbapi_connection is not None:
                    conn.invalidate()
                conn.close()
        raise AssertionError("unreachable: the second attempt returns or raises")

    def dispose(self, _engine: Engine | None = None) -> None:
        """Close the pooled connections and those in use once handed back (the reader
        stays usable: it reconnects)."""
        self._disposals += 1
        self.engine.dispose()


def _wrapped(exc: Exception, user_id: str, error: type[Exception], *, gone: bool) -> Exception:
    """A driver error as SQLAlchemy raises it on its own paths (``OperationalError`` …)."""
    return DBAPIError.instance(
        _STATE_SQL, (user_id,), exc, error, hide_parameters=True, connection_invalidated=gone
    )


_readers: WeakKeyDictionary[Engine, StateReader] = WeakKeyDictionary()
_readers_lock = threading.Lock()


def state_reader(engine: Engine) -> StateReader:
    """The reader for ``engine``'s database: made on first use, disposed with ``engine``."""
    with _readers_lock:
        reader = _readers.get(engine)
        if reader is None:
            reader = _readers[engine] = StateReader(engine)
            event.listen(engine, "engine_disposed", reader.dispose)
        return reader


def reader_of(sessions: sessionmaker[Session]) -> StateSource:
    """The shared reader of the engine ``sessions`` binds its sessions to, as a session
    names it (``Session.get_bind``; making one connects nothing): for callers that hold a
    session factory only — tests, benchmarks, maintenance tools."""
    with sessions() as session:
        bind = session.get_bind()
    return state_reader(bind if isinstance(bind, Engine) else bind.engine).read


def while_open(read: StateSource, sessions: ClosableSessions) -> StateSource:
    """``read`` until ``sessions`` is closed, then ``RuntimeClosedError`` as every one of its
    sessions raises: a closed runtime refuses the check too, although the check takes none
    of its sessions."""

    def checked(user_id: str) -> IndexState:
        if sessions.closed:
            raise RuntimeClosedError(sessions.message)
        return read(user_id)

    return checked
