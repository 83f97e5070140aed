"""The user's stored MEMORY.md and USER.md as (content, version), for the tool tests."""

from __future__ import annotations

from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from tests.sandbox.support import USER


def memory(store: MemoryStore) -> tuple[str, int]:
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None
    return stored.content, stored.version


def user_md(store: MemoryStore) -> tuple[str, int]:
    stored = store.get_memory_file(USER, FileKind.USER)
    assert stored is not None
    return stored.content, stored.version
