"""A TCP proxy to a real server that can go silent: ``freeze()`` stops forwarding on the
connections open so far while keeping their sockets open (a NAT or proxy that dropped
them without telling anyone); connections opened afterwards are forwarded as usual."""

from __future__ import annotations

import socket
import threading
from types import TracebackType


class FreezableProxy:
    def __init__(self, upstream_socket: str) -> None:
        self._upstream = upstream_socket  # a Unix socket: the embedded server's
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._frozen: list[threading.Event] = []
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> int:
        """Silence every connection open now; returns how many there were."""
        with self._lock:
            for event in self._frozen:
                event.set()
            return len(self._frozen)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                s.close()

    def __enter__(self) -> FreezableProxy:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX)
            server.connect(self._upstream)
            frozen = threading.Event()
            with self._lock:
                self._frozen.append(frozen)
                self._sockets += [client, server]
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst, frozen), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, frozen: threading.Event) -> None:
        try:
            while data := src.recv(65536):
                if frozen.is_set():
                    frozen.wait()  # swallow it: the kernel ACKed, nobody will answer
                    continue
                dst.sendall(data)
        except OSError:
            pass
