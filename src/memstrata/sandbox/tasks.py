"""How the sync service's tasks share one event loop: per-user locks, and frontend edits
that run to the end even when their caller is cancelled.

Both are per service instance and per event loop; across processes the DB's optimistic
lock and the merge rule keep concurrent edits from being lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from memstrata.memory.store import MemoryFile


@dataclass
class _LockEntry:
    lock: anyio.Lock
    users: int = 0
    owner: int | None = None  # the task holding it: a nested acquire by it passes through


class UserLocks:
    """One lock per user id, re-entrant within the task holding it."""

    def __init__(self) -> None:
        self._locks: dict[str, _LockEntry] = {}

    def held_here(self, user_id: str) -> bool:
        """Whether the current task holds ``user_id``'s lock."""
        entry = self._locks.get(user_id)
        return entry is not None and entry.owner == anyio.get_current_task().id

    @asynccontextmanager
    async def hold(self, user_id: str) -> AsyncIterator[None]:
        # One lock per user id, dropped when its last holder or waiter leaves, so the dict
        # does not grow with every user ever seen.
        if self.held_here(user_id):
            yield
            return
        entry = self._locks.get(user_id)
        if entry is None:
            entry = self._locks[user_id] = _LockEntry(anyio.Lock())
        entry.users += 1
        try:
            async with entry.lock:
                entry.owner = anyio.get_current_task().id
                try:
                    yield
                finally:
                    entry.owner = None
        finally:
            entry.users -= 1
            if entry.users == 0:
                self._locks.pop(user_id, None)


class WritesInFlight:
    """Frontend edits under way, each in a task of its own."""

    def __init__(self, locks: UserLocks) -> None:
        self.locks = locks
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
        """Wait up to ``timeout_s`` for the writes still under way; returns how many are
        still running."""
        pending = set(self._writes)
        if not pending:
            return 0
        _, running = await asyncio.wait(pending, timeout=timeout_s)
        return len(running)
