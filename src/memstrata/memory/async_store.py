"""The memory store as the async layers reach it: every call one hop to a worker thread.

:class:`~memstrata.memory.store.MemoryStore` is the synchronous core. The sync service and
the agent tools run on an event loop and call it only through this wrapper, so the thread
hops of the write path are here and nowhere else.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from functools import partial

import anyio.to_thread

from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryFile, MemoryStore


class AsyncStore:
    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    async def get(self, user_id: str, kind: FileKind) -> MemoryFile | None:
        return await anyio.to_thread.run_sync(self.store.get_memory_file, user_id, kind)

    async def files(self, user_id: str) -> builtins.list[MemoryFile]:
        return await anyio.to_thread.run_sync(self.store.list_memory_files, user_id)

    async def provision(self, user_id: str) -> builtins.list[FileKind]:
        return await anyio.to_thread.run_sync(self.store.provision_default_files, user_id)

    async def upsert(
        self,
        user_id: str,
        kind: FileKind,
        content: str,
        expected: int | None,
        *,
        skip_unchanged: bool = True,
    ) -> MemoryFile:
        """The one write path (``MemoryStore.upsert_memory_file``). Its async callers (a
        frontend edit, a read-back) write only a text the file does not hold already:
        ``skip_unchanged`` (:func:`~memstrata.memory.same_text.holds_text`)."""
        write = partial(self.store.upsert_memory_file, skip_unchanged=skip_unchanged)
        return await anyio.to_thread.run_sync(write, user_id, kind, content, expected)

    async def edit(
        self, user_id: str, kind: FileKind, edit: Callable[[str], str], *, attempts: int
    ) -> MemoryFile:
        """``MemoryStore.edit_memory_file``: ``edit`` applied to the stored text."""
        run = partial(self.store.edit_memory_file, attempts=attempts)
        return await anyio.to_thread.run_sync(run, user_id, kind, edit)
