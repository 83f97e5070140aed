"""Waiting for a just-spawned local server to answer, and explaining why it did not.

The server's stderr goes to a file (``local_server``): its tail is the explanation of a
failed start, and tells a port someone else took apart from any other failure.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from typing import IO

import httpx

from memstrata.errors import EmbeddingError
from memstrata.retrieval.local_server_spawn import EXECUTABLE_NAME

# How much of the end of the server's stderr explains a failed start (bytes).
STDERR_TAIL_BYTES = 2000
# How often a starting server's /health is asked.
HEALTH_POLL_S = 0.05


def stderr_tail(stderr: IO[bytes] | None) -> str:
    """The end of a server's stderr file as text; "" without one."""
    if stderr is None:
        return ""
    try:
        stderr.seek(0)
        return stderr.read()[-STDERR_TAIL_BYTES:].decode("utf-8", "replace").strip()
    except ValueError:  # closed by a stop() that did not wait for the supervisor
        return ""


def port_taken(stderr: str) -> bool:
    """Whether a failed start's stderr says another process holds the port."""
    return "address already in use" in stderr.lower()


def wait_healthy(
    process: subprocess.Popen[bytes],
    host: str,
    port: int,
    timeout_s: float,
    stopping: threading.Event,
    stderr: Callable[[], str],
) -> None:
    """Return once ``process`` answers its ``/health`` on ``host:port``; raise
    ``EmbeddingError`` (with ``stderr()``) if it exits first or is still silent after
    ``timeout_s``, or at once when ``stopping`` is set."""
    url = f"http://{host}:{port}/health"
    deadline = time.monotonic() + timeout_s
    # trust_env=False: a proxy configured for the internet must not see loopback calls.
    with httpx.Client(timeout=1.0, trust_env=False) as client:
        while True:
            if stopping.is_set():  # stop() was called: it terminates this child
                raise EmbeddingError(f"{EXECUTABLE_NAME} start on port {port} cancelled")
            code = process.poll()
            if code is not None:
                raise EmbeddingError(
                    f"{EXECUTABLE_NAME} exited with code {code} before becoming healthy: "
                    f"{stderr() or '(no stderr)'}"
                )
            try:
                # On a port this process holds, a call made before the child serves waits
                # in the socket's backlog and is answered once it does (or times out).
                healthy = client.get(url).status_code == 200
            except httpx.TransportError:
                healthy = False  # not listening yet
            # Re-check the child: on a bare server's port, which it binds itself, a
            # stranger who grabbed the port could answer instead (a held port has none).
            if healthy and process.poll() is None:
                return
            if time.monotonic() > deadline:
                raise EmbeddingError(
                    f"{EXECUTABLE_NAME} did not answer {url} within "
                    f"{timeout_s:g} s: {stderr() or '(no stderr)'}"
                )
            stopping.wait(HEALTH_POLL_S)
