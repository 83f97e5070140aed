"""Engine and session helpers, and the pgvector precondition check."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, event, make_url, text
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from memstrata.db.open_connections import track
from memstrata.db.pool_watch import OVERFLOW_PER_POOLED, WatchedPool
from memstrata.errors import DatabaseSetupError, PgvectorMissingError

PGVECTOR_HINT = (
    "install pgvector on that server (https://github.com/pgvector/pgvector#installation), "
    "or unset MEMSTRATA_DATABASE_URL to use the embedded PostgreSQL that ships with it"
)


# A server that accepts the TCP connection but never answers must not hang start-up or a
# request for good; and a connection the network silently dropped is noticed by the
# kernel's keepalives within about a minute instead of the OS default of hours. Each can be
# overridden in MEMSTRATA_DATABASE_URL's query string (libpq's own parameter names).
CONNECT_ARGS: dict[str, int] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}


def connect_args(url: str) -> dict[str, int]:
    """``CONNECT_ARGS`` less those the URL's query string sets itself."""
    given = make_url(url).query
    return {k: v for k, v in CONNECT_ARGS.items() if k not in given}


# How long a request waits for a pooled connection before it is a 503: SQLAlchemy's 30 s
# default held every other user's request that long while one user's locked writes had
# taken the pool.
POOL_TIMEOUT_S = 10.0


# SQLSTATE read_only_sql_transaction: the server this connection reached takes no writes.
READ_ONLY_SQLSTATE = "25006"


def make_engine(url: str, pool_size: int = 5) -> Engine:
    engine = create_engine(
        url,
        poolclass=WatchedPool,  # its checkouts' waits for /metrics (db.pool_watch)
        pool_size=pool_size,
        max_overflow=pool_size * OVERFLOW_PER_POOLED,
        pool_timeout=POOL_TIMEOUT_S,
        pool_pre_ping=True,
        connect_args=connect_args(url),
        # A failed statement's message must not carry its parameters into logs and error
        # details: they are users' memory files and conversation turns.
        hide_parameters=True,
    )
    event.listen(engine, "handle_error", reconnect_after_read_only)
    # From the first connection (the start-up checks' stays pooled): the database monitor
    # cuts them all off when the server freezes (db.open_connections).
    track(engine)
    return engine


def reconnect_after_read_only(context: ExceptionContext) -> None:
    """A write refused as read-only is handled as a lost connection, and SQLAlchemy then
    invalidates the whole pool (on purpose: every pooled connection is on the same demoted
    server): each is opened again on its next use. After a failover the URL's name reaches
    the new primary, but the pooled connections stayed on the demoted one, which refused
    every write for as long as they lived; the refused request still answers 503
    ``database_read_only``. Where the read-only server is the only one (a role's
    ``default_transaction_read_only``) the cost is that every refused write makes each
    pooled connection, readers' included, reconnect on its next use."""
    if getattr(context.original_exception, "sqlstate", None) == READ_ONLY_SQLSTATE:
        context.is_disconnect = True


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: commit on success, roll back on any exception."""
    with factory() as session, session.begin():
        yield session


def describe(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)


def check_pgvector(engine: Engine) -> str:
    """Return the installed pgvector version, or fail loudly (spec: startup must fail)."""
    try:
        with engine.connect() as conn:
            installed = conn.execute(
                text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            ).scalar()
            if installed is not None:
                return str(installed)
            available = conn.execute(
                text("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'")
            ).scalar()
    except OperationalError as exc:
        raise DatabaseSetupError(
            f"cannot connect to PostgreSQL at {describe(engine)}: {exc.orig}"
        ) from exc
    if available is None:
        raise PgvectorMissingError(
            f"the pgvector extension is not available on {describe(engine)}; {PGVECTOR_HINT}"
        )
    # Only a superuser may create it (no trusted extension): `memstrata db upgrade` run by
    # another role would stop at a second refusal saying just that.
    raise PgvectorMissingError(
        f"the pgvector extension is available but not created on {describe(engine)}; "
        f"have a superuser run `CREATE EXTENSION vector;` in database {engine.url.database} "
        "(or run `memstrata db upgrade` as one)"
    )
