"""A database that fails while a command runs, as one ``error:`` line.

Opening the database is checked with its own messages (``cannot connect to PostgreSQL at
…``); what fails later — the server stopped or restarted, a lock waited for past
``lock_timeout``, a statement past ``statement_timeout``, a grant missing — surfaced as
SQLAlchemy's exception and a traceback of up to 560 lines. Every command answers it here
(``memstrata.cli.help_format``'s command class, and :func:`database_failures` where a
command adds what it leaves behind): what stopped, the cause in a few words, what to do;
exit status 1, as every other database failure of the CLI. The traceback goes to the log
at DEBUG (``MEMSTRATA_LOG_LEVEL=DEBUG`` shows it).

Nothing here imports SQLAlchemy or psycopg: a command that never loaded them cannot have
failed in them, and ``--help`` must stay cheap (tests/cli/test_startup_imports.py).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from memstrata.cli.app import fail

logger = logging.getLogger(__name__)

# A cause is quoted up to this many characters: its first line says it, the rest is the
# statement.
CAUSE_CHARS = 200
# SQLSTATEs with their own words: what happened, what to do.
_BY_SQLSTATE = {
    "55P03": (
        "a statement waited longer than lock_timeout for a lock another session holds",
        "run it again once that session (a migration, a `LOCK TABLE`, a long transaction: "
        "pg_stat_activity shows it) has ended",
    ),
    "57014": (
        "a statement ran longer than statement_timeout, or was cancelled",
        "run it again; if it times out again, raise statement_timeout for the role",
    ),
    "40P01": ("a deadlock with another session", "run it again"),
    "40001": ("a serialization failure with another session", "run it again"),
    "42501": (
        "the role lacks a privilege on memstrata's tables",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES and USAGE ON ALL SEQUENCES IN "
        "SCHEMA public to the role of MEMSTRATA_DATABASE_URL, or use the role that owns "
        "them; then run it again",
    ),
    "25006": (
        "the database is read-only (a hot standby, or default_transaction_read_only)",
        "point MEMSTRATA_DATABASE_URL at the primary; then run it again",
    ),
}
_LOST_FIX = (
    "check that PostgreSQL is running and reachable at MEMSTRATA_DATABASE_URL, then run it again"
)


def database_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the database's (SQLAlchemy's or the driver's)."""
    sqlalchemy_exc = sys.modules.get("sqlalchemy.exc")
    psycopg = sys.modules.get("psycopg")
    return (sqlalchemy_exc is not None and isinstance(exc, sqlalchemy_exc.SQLAlchemyError)) or (
        psycopg is not None and isinstance(exc, psycopg.Error)
    )


def failure_message(exc: BaseException, command: str, after: str = "") -> str:
    """``<command> stopped: <what failed> (<cause>): <what to do>``, then ``after``: what
    the command leaves behind, when it knows."""
    orig = getattr(exc, "orig", None) or exc
    sqlstate = str(getattr(orig, "sqlstate", None) or "")
    cause = _first_line(orig)
    if sqlstate in _BY_SQLSTATE:
        what, fix = _BY_SQLSTATE[sqlstate]
    elif type(exc).__name__ == "TimeoutError":  # SQLAlchemy's pool: every connection busy
        what, fix = "no database connection came free in time", "run it again"
    elif _lost(exc, sqlstate):
        what, fix = "lost the connection to PostgreSQL", _LOST_FIX
        # libpq's "connection to server at "…", port … failed: Connection refused": the
        # address is MEMSTRATA_DATABASE_URL's, the last words are the cause.
        cause = cause.rsplit("failed: ", 1)[-1]
        if type(exc).__name__ == "CommitOutcomeUnknownError":
            what += " while a write was being committed (it may or may not be stored)"
    else:
        what = "the database refused a statement"
        fix = "run it again; if it fails again, MEMSTRATA_LOG_LEVEL=DEBUG logs the traceback"
    return f"{command} stopped: {what} ({cause}): {fix}{'; ' + after if after else ''}"


def _lost(exc: BaseException, sqlstate: str) -> bool:
    """The connection is gone (the server stopped, restarted or unreachable), not a
    statement refused: class 08 (connection exception), 57P01-57P03 (shutdown, crash
    recovery), or an error SQLAlchemy counts as a disconnect."""
    if sqlstate.startswith("08") or sqlstate in ("57P01", "57P02", "57P03"):
        return True
    if getattr(exc, "connection_invalidated", False):
        return True
    return type(exc).__name__ in ("OperationalError", "InterfaceError") and not sqlstate


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= CAUSE_CHARS else text[: CAUSE_CHARS - 1] + "…"


@contextmanager
def database_failures(command: str, after: str = "") -> Iterator[None]:
    """A database failure in the block is :func:`failure_message`'s line and exit 1."""
    try:
        yield
    except Exception as exc:
        if not database_error(exc):
            raise
        logger.debug("%s: database failure", command, exc_info=exc)
        fail(failure_message(exc, command, after))
