"""A real ``memstrata serve`` in its own process: start it, wait until it is ready, stop it.

For benchmarks and tests that measure or exercise the service as a platform runs it (one
definition, so every caller waits, reports an early exit and cleans up the same way), and
for picking a free loopback port.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import IO, Any

import httpx

SERVE = (sys.executable, "-P", "-c", "from memstrata.cli import main; main()", "serve")


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the OS's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def start_serve(
    env: Mapping[str, str],
    port: int,
    *,
    host: str = "127.0.0.1",
    stdout: int | IO[Any] | None = subprocess.DEVNULL,
    stderr: int | IO[Any] | None = subprocess.DEVNULL,
    text: bool = False,
) -> subprocess.Popen[Any]:
    """``memstrata serve`` on ``host:port`` with exactly ``env`` as its environment."""
    command = [*SERVE, "--host", host, "--port", str(port)]
    return subprocess.Popen(
        command, env=dict(env), stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, text=text
    )


def wait_ready(
    process: subprocess.Popen[Any],
    url: str,
    *,
    timeout_s: float = 120,
    path: str = "/readyz",
    output: Callable[[], str] | None = None,
) -> None:
    """Poll ``url + path`` until it answers 200. ``RuntimeError`` when the process exits
    first or the time runs out, with ``output()`` (e.g. its stderr) in the message."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            said = output() if output is not None else _stderr(process)
            raise RuntimeError(f"memstrata serve exited with {process.returncode}: {said}")
        try:
            if httpx.get(f"{url}{path}", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    said = output() if output is not None else ""
    raise RuntimeError(f"memstrata serve at {url} not ready within {timeout_s:g} s {said}")


def stop_serve(process: subprocess.Popen[Any], timeout_s: float = 20) -> None:
    """SIGTERM (a graceful stop that also stops what it started), then SIGKILL."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def running_serve(
    env: Mapping[str, str],
    *,
    timeout_s: float = 120,
    stderr: int | IO[Any] | None = subprocess.PIPE,
) -> Iterator[str]:
    """Start, wait for ``/readyz``, yield the base URL, stop."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start_serve(env, port, stderr=stderr)
    try:
        wait_ready(process, url, timeout_s=timeout_s)
        yield url
    finally:
        stop_serve(process)


def _stderr(process: subprocess.Popen[Any]) -> str:
    if process.stderr is None:
        return "(stderr not captured)"
    data = process.stderr.read()
    text = data.decode(errors="replace") if isinstance(data, bytes) else str(data)
    return text[-2000:]
