"""How the sync service's tasks take turns: per-user locks, and frontend edits that run to
the end even when their caller is cancelled.

The locks hold across the event loops and threads of one process: a host may drive one
runtime from several threads, each with a loop of its own (``asyncio.run`` per request in a
threaded WSGI server, per job in a Celery worker). asyncio's and anyio's locks cannot serve
there: a release completes the next waiter's future from the releasing thread without
waking the waiter's loop, which may then sleep in its selector forever. Across processes
the DB's optimistic lock and the merge rule keep concurrent edits from being lost.
"""

from __future__ import annotations

import asyncio
import enum
import threading
from collections import deque
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from memstrata.memory.store import MemoryFile


class _Turn(enum.Enum):
    """Where a waiter stands; only changed under the lock's mutex, so a release and the
    waiter's cancellation agree on whether the lock was handed to it."""

    WAITING = enum.auto()
    GRANTED = enum.auto()  # the lock is the waiter's, whether or not its task woke up yet
    CANCELLED = enum.auto()  # gave up, or its loop closed: never to be granted


@dataclass(eq=False)
class _Waiter:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]
    turn: _Turn = _Turn.WAITING


def wake(future: asyncio.Future[None]) -> None:
    """Complete a waiter's future; called on its own loop (``call_soon_threadsafe``). A
    future done meanwhile (cancelled, timed out) is left alone: a lock's waiter then sees
    that it was GRANTED and passes the lock on."""
    if not future.done():
        future.set_result(None)


class LoopSafeLock:
    """A FIFO lock for the tasks of every event loop and thread of this process; not
    re-entrant.

    A ``threading.Lock`` guards the state, held for a few statements and never across an
    await. A release hands the lock to the first task still waiting and wakes it with
    ``call_soon_threadsafe``, which wakes its loop in whichever thread it sleeps.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        # Stays set while the lock passes from holder to waiter, so while anyone waits.
        self._locked = False
        self._waiters: deque[_Waiter] = deque()

    def locked(self) -> bool:
        return self._locked

    async def acquire(self) -> None:
        loop = asyncio.get_running_loop()
        with self._mutex:
            if not self._locked:
                self._locked = True
                return
            waiter = _Waiter(loop, loop.create_future())
            self._waiters.append(waiter)
        try:
            await waiter.future
        except BaseException:
            # Cancelled while waiting, possibly just after a release chose this task: a
            # lock handed over must be passed on, or nobody would ever release it.
            if self._withdraw(waiter):
                self.release()
            raise

    def release(self) -> None:
        """Hand the lock to the task that has waited longest, or unlock it."""
        with self._mutex:
            while self._waiters:
                if self._hand_over(self._waiters.popleft()):
                    return
            self._locked = False

    def _hand_over(self, waiter: _Waiter) -> bool:
        """Grant the lock to ``waiter`` (under the mutex); False if its loop is closed."""
        waiter.turn = _Turn.GRANTED
        try:
            waiter.loop.call_soon_threadsafe(wake, waiter.future)
        except RuntimeError:
            # A closed loop never runs its tasks again: that waiter cannot take the lock.
            waiter.turn = _Turn.CANCELLED
            return False
        return True

    def _withdraw(self, waiter: _Waiter) -> bool:
        """Take a waiter that stopped waiting out of the queue; whether it had been granted
        the lock already."""
        with self._mutex:
            if waiter.turn is _Turn.GRANTED:
                return True
            if waiter.turn is _Turn.WAITING:
                self._waiters.remove(waiter)
                waiter.turn = _Turn.CANCELLED
            return False


@dataclass(eq=False)
class _LockEntry:
    lock: LoopSafeLock = field(default_factory=LoopSafeLock)
    users: int = 0  # its holder and waiters, counted under UserLocks' mutex
    # The task holding it: a nested acquire by it passes through. Set and cleared by that
    # task alone, so it can read it without the mutex.
    owner: asyncio.Task[Any] | None = None


class UserLocks:
    """One lock per user id, shared by every event loop and thread of this process, and
    re-entrant within the task holding it."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()  # guards the dict and the entries' ``users``
        self._locks: dict[str, _LockEntry] = {}

    def held_here(self, user_id: str) -> bool:
        """Whether the current task holds ``user_id``'s lock."""
        # Without the mutex: a dict lookup is atomic, and only this task could have made
        # itself the owner. The task object itself, alive while it holds, tells the tasks
        # of every loop apart (ids of tasks of different loops can repeat once one ended).
        entry = self._locks.get(user_id)
        task = asyncio.current_task()
        return entry is not None and task is not None and entry.owner is task

    @asynccontextmanager
    async def hold(self, user_id: str) -> AsyncIterator[None]:
        if self.held_here(user_id):
            yield
            return
        entry = self._join(user_id)
        try:
            await entry.lock.acquire()
            entry.owner = asyncio.current_task()
            try:
                yield
            finally:
                entry.owner = None  # before the release: the next holder sets its own
                entry.lock.release()
        finally:
            self._leave(user_id, entry)

    def _join(self, user_id: str) -> _LockEntry:
        with self._mutex:
            entry = self._locks.get(user_id)
            if entry is None:
                entry = self._locks[user_id] = _LockEntry()
            entry.users += 1
            return entry

    def _leave(self, user_id: str, entry: _LockEntry) -> None:
        # The entry is dropped when its last holder or waiter leaves, so the dict does not
        # grow with every user ever seen.
        with self._mutex:
            entry.users -= 1
            if entry.users == 0:
                del self._locks[user_id]


class WritesInFlight:
    """Frontend edits under way, each in a task of its own (on the loop of its caller)."""

    def __init__(self, locks: UserLocks) -> None:
        self.locks = locks
        # The writes of every loop using this service: adding, discarding and copying are
        # single set operations, safe from several threads.
        self._writes: set[asyncio.Future[MemoryFile]] = set()

    async def run(self, user_id: str, write: Coroutine[Any, Any, MemoryFile]) -> MemoryFile:
        """Run ``write`` (which takes ``user_id``'s lock) in its own task, which a
        cancellation of the caller does not reach.

        The upsert commits on a worker thread that no cancellation stops, so a write cut
        off half-way would land in the DB without its mirror and its NOTIFY: sandboxes and
        other processes' agents would keep the old copy. asyncio's native cancel (uvicorn's
        at the end of the shutdown grace) passes through anyio's shielded scopes, hence a
        task of its own; :meth:`settle` lets the server wait for it before closing.
        """
        if self.locks.held_here(user_id):
            return await write  # the caller holds the user lock, which a new task would await
        task = asyncio.ensure_future(write)
        self._writes.add(task)
        task.add_done_callback(self._ended)
        return await asyncio.shield(task)

    def _ended(self, task: asyncio.Future[MemoryFile]) -> None:
        self._writes.discard(task)
        if not task.cancelled():
            # Retrieved here too, as a caller that was cut off no longer awaits it: no
            # "exception never retrieved" at exit. A caller still waiting raises it.
            task.exception()

    async def settle(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for the writes still under way on this event loop;
        returns how many are still running.

        Writes started on other loops (other threads) are neither awaited nor counted: a
        wait on another loop's future is completed from that loop's thread, which does not
        wake this loop (it would sit out the whole timeout), and those writes end with the
        loop that runs them.
        """
        loop = asyncio.get_running_loop()
        pending = {write for write in set(self._writes) if write.get_loop() is loop}
        if not pending:
            return 0
        _, running = await asyncio.wait(pending, timeout=timeout_s)
        return len(running)
