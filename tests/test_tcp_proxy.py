"""The test proxy (``tests/tcp_proxy.py``) itself, in front of a real Unix-socket echo
server: it forwards, a frozen connection goes silent, and once shut its port refuses."""

from __future__ import annotations

import contextlib
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tcp_proxy import TcpProxy


@pytest.fixture
def echo() -> Iterator[str]:
    """A Unix socket that sends back whatever it is sent, on each connection."""
    # A short directory of its own: a Unix socket's path may not be longer than 107 bytes.
    with tempfile.TemporaryDirectory(prefix="echo") as directory:
        path = str(Path(directory) / "s")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(path)
        listener.listen()

        def serve(conn: socket.socket) -> None:
            with conn, contextlib.suppress(OSError):
                while data := conn.recv(65536):
                    conn.sendall(data)

        def accept() -> None:
            with contextlib.suppress(OSError):
                while True:
                    conn, _ = listener.accept()
                    threading.Thread(target=serve, args=(conn,), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
        yield path
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()


def connect(proxy: TcpProxy) -> socket.socket:
    client = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    client.settimeout(5)
    return client


def test_forwards_both_ways(echo: str) -> None:
    with TcpProxy(echo) as proxy, connect(proxy) as client:
        client.sendall(b"ping")
        assert client.recv(16) == b"ping"


def test_a_frozen_connection_goes_silent_and_a_new_one_is_forwarded(echo: str) -> None:
    with TcpProxy(echo) as proxy, connect(proxy) as old:
        old.sendall(b"one")
        assert old.recv(16) == b"one"
        assert proxy.freeze() == 1
        old.sendall(b"lost")
        old.settimeout(0.3)
        with pytest.raises(TimeoutError):
            old.recv(16)
        with connect(proxy) as new:
            new.sendall(b"two")
            assert new.recv(16) == b"two"


def test_once_shut_the_port_refuses_and_open_connections_are_closed(echo: str) -> None:
    """Closing the listener alone left an ``accept`` blocked in the proxy's thread: the port
    kept listening and forwarded one more connection, left open for good."""
    proxy = TcpProxy(echo)
    with connect(proxy) as client:
        client.sendall(b"ping")
        assert client.recv(16) == b"ping"
        proxy.shut()
        assert client.recv(16) == b""  # closed by the proxy
    with pytest.raises(ConnectionRefusedError):
        connect(proxy).close()
