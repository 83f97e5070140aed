"""A loopback TCP proxy to a Unix socket (the test database's), for faults no real server
can be told to make:

- ``freeze()`` stops forwarding on the connections open so far while keeping their sockets
  open (a NAT or proxy that dropped them without telling anyone); connections opened
  afterwards are forwarded as usual.
- ``shut()`` (also on leaving the ``with`` block) makes the port refuse connections from
  then on and closes every connection it forwarded, as if PostgreSQL had stopped.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


class TcpProxy:
    def __init__(self, upstream_socket: str) -> None:
        self._upstream = upstream_socket
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._frozen: list[threading.Event] = []
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._shut = False
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def freeze(self) -> int:
        """Silence every connection open now; returns how many there were."""
        with self._lock:
            for event in self._frozen:
                event.set()
            return len(self._frozen)

    def shut(self) -> None:
        """Refuse from now on and close what is open. ``shutdown`` before each ``close``:
        closing alone wakes no thread blocked on the socket, and the blocked call keeps it
        open: an ``accept`` keeps the port listening and forwards one more connection, a
        ``recv`` keeps a forwarded connection up until data next arrives on it."""
        with self._lock:
            self._shut = True
        _shut_down(self._listener)
        self._accepting.join(5)
        with self._lock:
            for s in self._sockets:
                _shut_down(s)

    def __enter__(self) -> TcpProxy:
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
                if self._shut:  # accepted as it was shut: refused after all
                    client.close()
                    return
                server = socket.socket(socket.AF_UNIX)
                try:
                    server.connect(self._upstream)
                except OSError:  # the upstream is gone: so is this connection
                    server.close()
                    client.close()
                    continue
                frozen = threading.Event()
                self._frozen.append(frozen)
                self._sockets += [client, server]
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst, frozen), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, frozen: threading.Event) -> None:
        try:
            while data := src.recv(65536):
                if not frozen.is_set():
                    dst.sendall(data)
                # else swallowed: the kernel ACKed it, and nobody will answer
        except OSError:
            pass


def _shut_down(s: socket.socket) -> None:
    with contextlib.suppress(OSError):  # not connected (any more): nothing to wake
        s.shutdown(socket.SHUT_RDWR)
    s.close()
