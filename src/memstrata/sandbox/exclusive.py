"""Cross-process exclusion on one sandbox: the optional ``exclusive()`` of a sandbox.

Two processes may sync one sandbox: replicas sharing a data directory (and so the default
sandbox root), or an API replica and an agent host reaching the same platform sandbox.
A sync reads the sandbox file, its base record and the DB row at three moments; without
exclusion another process's push or tool write lands in between, and a stale read is
written back under a correct version (the optimistic lock cannot see it). A sandbox that
has ``exclusive()`` — an async context manager held around each reconcile or push of that
sandbox (read → decide → DB write → push) — rules that out; one without it works as before.

:func:`exclusive` finds the method (or a no-op); :class:`FileLocks` implements it for
local directories with ``flock`` on ``.memstrata/lock``: taken with ``LOCK_NB`` and polled
(the event loop never blocks, a wait is cancellable and :mod:`memstrata.sandbox.timed`
bounds it by the sandbox deadline), released by the kernel if its process dies, and
re-entrant for the task holding it, so that a tool can hold it across its sandbox write and
the sync that reads the write back. Lock order: the in-process per-user lock
(:mod:`memstrata.sandbox.tasks`) is always taken first, and a task holds at most one
sandbox lock, so no two tasks wait for each other in opposite order.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol, runtime_checkable

if sys.platform != "win32":
    import fcntl

LOCK_FILE = ".memstrata/lock"
# Polling a busy lock: from 1 ms, doubling to 20 ms (a reconcile holds it for milliseconds,
# or for its embedding call when it writes USER/MEMORY).
_FIRST_POLL_S = 0.001
_MAX_POLL_S = 0.02


@runtime_checkable
class ExclusiveSandbox(Protocol):
    """A sandbox that can be held by one task of one process at a time (module doc)."""

    def exclusive(self) -> AbstractAsyncContextManager[None]: ...


def exclusive(sandbox: object) -> AbstractAsyncContextManager[None]:
    """``sandbox.exclusive()``, or a context that holds nothing for a sandbox without it."""
    if isinstance(sandbox, ExclusiveSandbox):
        return sandbox.exclusive()
    return contextlib.nullcontext()


class FileLocks:
    """``flock`` locks on lock files, re-entrant for the task that holds one (module doc).

    Shared by the sandboxes of one provider, so that two handles on one directory know each
    other's holder; exclusion itself is always the kernel's (two descriptors of one process
    exclude each other too), so two providers in one process behave as two processes.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held: dict[str, tuple[asyncio.Task[Any], int]] = {}  # key -> (holder, depth)

    @asynccontextmanager
    async def hold(self, key: str, open_file: Callable[[], int]) -> AsyncIterator[None]:
        """Hold the lock ``key`` names; ``open_file`` (run in a worker thread) opens it."""
        task = asyncio.current_task()
        if task is None or sys.platform == "win32":
            yield  # no task to own it, or no flock: nothing is held (a sandbox without it)
            return
        if self._enter_again(key, task):
            try:
                yield
            finally:
                self._leave(key)
            return
        fd = await opened(open_file)
        try:
            delay = _FIRST_POLL_S
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, _MAX_POLL_S)
            with self._mutex:
                self._held[key] = (task, 1)
            try:
                yield
            finally:
                with self._mutex:
                    self._held.pop(key, None)
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _enter_again(self, key: str, task: asyncio.Task[Any]) -> bool:
        with self._mutex:
            held = self._held.get(key)
            if held is None or held[0] is not task:
                return False
            self._held[key] = (task, held[1] + 1)
            return True

    def _leave(self, key: str) -> None:
        with self._mutex:
            task, depth = self._held[key]
            self._held[key] = (task, depth - 1)


async def opened(open_file: Callable[[], int]) -> int:
    """``open_file()`` in a worker thread; a descriptor opened after the caller stopped
    waiting (cancelled, timed out) is closed, never leaked."""
    future = asyncio.get_running_loop().run_in_executor(None, open_file)
    try:
        return await asyncio.shield(future)
    except BaseException:
        future.add_done_callback(_close_result)
        raise


def _close_result(future: asyncio.Future[int]) -> None:
    if not future.cancelled() and future.exception() is None:
        os.close(future.result())
