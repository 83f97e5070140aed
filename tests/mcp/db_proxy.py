"""A loopback TCP proxy to the test database's Unix socket that can be shut for good:
after :meth:`ShutProxy.shut` its port refuses connections and every connection it
forwarded is closed, as if PostgreSQL had stopped."""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


class ShutProxy:
    def __init__(self, upstream_socket: str) -> None:
        self._upstream = upstream_socket
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._shut = False
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def shut(self) -> None:
        """Refuse from now on and close what is open. ``shutdown`` first: closing alone
        does not wake an ``accept`` blocked in another thread, which would forward one
        more connection."""
        with self._lock:
            self._shut = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._accepting.join(5)
        with self._lock:
            for s in self._sockets:
                s.close()

    def __enter__(self) -> ShutProxy:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shut()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._shut:
                    client.close()
                    return
                server = socket.socket(socket.AF_UNIX)
                server.connect(self._upstream)
                self._sockets += [client, server]
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
