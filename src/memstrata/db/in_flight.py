"""What a statement in flight raises when its connection is lost: cut off by the database
monitor in a freeze (:mod:`memstrata.db.open_connections`), or dropped by the server.

Before its COMMIT was sent, abandoning a transaction is safe: PostgreSQL rolls it back
when it finds the client gone (once it runs again, in a freeze). Such a statement cut off
by the monitor raises :class:`CutOffError`, whose words are the monitor's (``db.lost``)
rather than the driver's "server closed the connection unexpectedly", which the server
did not do. A COMMIT sent is another matter: the server may have carried it out, or may
carry it out when it runs again (a frozen backend that had read it commits on waking,
then fails to answer), so a COMMIT whose connection is lost raises
:class:`CommitOutcomeUnknownError`, whatever cut it: its 503 must not read as "not
stored", or a client would write again what is stored. Waiting for the server instead
would hold the request for the whole freeze, which the cut is there to end.

``psycopg.Connection.cancel()`` cannot end a statement in a freeze (it asks the
postmaster, frozen too), and closing the connection from the monitor's thread
(``Connection.close()`` calls ``pgconn.finish()`` without taking the connection's lock)
while the request's thread is inside libpq with it breaks libpq's one rule for threads:
no two of them on one ``PGconn`` at once. Shutting the socket down, as the monitor does,
touches no ``PGconn``: the request's own thread finds the connection broken.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import OperationalError

from memstrata.db.pool_watch import unavailable
from memstrata.errors import DatabaseUnavailableError

# Set in a pooled connection's ``info`` from the moment a COMMIT is sent until the next
# transaction begins or the connection is handed back.
COMMITTING = "memstrata.committing"


class CutOffError(DatabaseUnavailableError, OperationalError):
    """A statement whose connection was lost before its COMMIT was sent: nothing of its
    transaction is stored. An ``OperationalError`` too, as the workers that catch those
    expect of a lost database."""

    def __init__(self, message: str, orig: BaseException) -> None:
        OperationalError.__init__(
            self, None, None, orig, hide_parameters=True, connection_invalidated=True
        )
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> Any:
        return type(self), (self.message, self.orig)


class CommitOutcomeUnknownError(CutOffError):
    """A COMMIT whose connection was lost before its answer: the write may be stored."""


def outcome_unknown(cause: str) -> str:
    """What a write whose COMMIT got no answer is told: what happened, how to find out."""
    return (
        f"the database stopped answering while this write was being committed ({cause}): "
        "it may or may not be stored. Once the database answers again, read it back (a "
        "memory file's version) or send the same write again, which is safe: the same "
        "text of a file answers unchanged (with If-Match, a 409 with same_content), a "
        "turn already stored is reported unchanged"
    )


def watch_in_flight(engine: Engine, cut_because: Callable[[Any], str | None]) -> None:
    """Raise :class:`CutOffError` / :class:`CommitOutcomeUnknownError` for ``engine``'s
    lost statements; ``cut_because``: the monitor's error for a connection it cut off,
    else None."""
    event.listen(engine, "commit", _committing)
    event.listen(engine, "begin", _not_committing)
    event.listen(engine, "checkin", _handed_back)

    def lost(context: ExceptionContext) -> BaseException | None:
        conn = context.connection
        orig = context.original_exception
        if conn is None or conn.closed or conn.invalidated:
            return None
        try:
            fairy = conn.connection
        except Exception:  # closed meanwhile: SQLAlchemy's own error stands
            return None
        dbapi = fairy.dbapi_connection
        dbapi_error = context.dialect.loaded_dbapi.Error
        if not isinstance(orig, dbapi_error) or not context.dialect.is_disconnect(
            cast(Any, orig), dbapi, None
        ):
            return None
        committing = fairy.info.pop(COMMITTING, False) and context.statement is None
        cut = cut_because(dbapi)
        cause = f"db.lost: {cut}" if cut is not None else first_line(orig)
        if committing:
            return CommitOutcomeUnknownError(outcome_unknown(cause), orig)
        if cut is not None:
            return CutOffError(f"{unavailable(cut)}: its statement was cut off", orig)
        return None

    event.listen(engine, "handle_error", lost)


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def _committing(conn: Connection) -> None:
    conn.info[COMMITTING] = True


def _not_committing(conn: Connection) -> None:
    conn.info.pop(COMMITTING, None)


def _handed_back(_dbapi_connection: object, record: Any) -> None:
    if record is not None:
        record.info.pop(COMMITTING, None)
