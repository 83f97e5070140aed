"""What the push-record tests share (``test_push_chain_rule.py``, ``test_push_write_fails.py``,
``test_push_chains.py``): ``USER``'s MEMORY.md as the database holds it, and the three copies
of the case they replay — the template, the user adding two facts, the user deleting one."""

from __future__ import annotations

from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryFile, MemoryStore
from tests.sandbox.support import USER

MEMORY_MD = FileKind.MEMORY.filename

V1 = "# Memory\n\n## Facts\n"
V2 = V1 + "- X: likes tea\n- Y: home address is 1 Secret Road\n"
V3 = V1 + "- X: likes tea\n"  # the user deleted Y: acknowledged


def file(version: int, content: str) -> MemoryFile:
    """The MEMORY.md row at ``version`` (what a push writes to the sandbox)."""
    return MemoryFile(USER, FileKind.MEMORY, content, version, None)


def stored(store: MemoryStore) -> tuple[str, int]:
    """The MEMORY.md row now: its content and version."""
    found = store.get_memory_file(USER, FileKind.MEMORY)
    assert found is not None
    return found.content, found.version
