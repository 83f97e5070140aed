"""Two If-Match writes of one file from the same version at once, in one process (two
threads, each with its own event loop, released by a barrier), on the real runtime and
PostgreSQL: one wins, and the loser's conflict carries the version that won — not the
version both started from, which a client would retry on and lose again."""

from __future__ import annotations

import threading
from collections.abc import Callable

import anyio
import pytest

from memstrata.errors import VersionConflictError
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryFile
from memstrata.runtime import Memstrata

pytestmark = pytest.mark.timeout(120)

ROUNDS = 10


def _race(mem: Memstrata, user: str, kind: FileKind, base: int) -> list[object]:
    """Both writers' outcomes: the file stored, or the conflict raised."""
    barrier = threading.Barrier(2)
    outcomes: list[object] = [None, None]

    def writer(slot: int) -> None:
        async def write() -> MemoryFile:
            return await mem.sync.frontend_edit(user, kind, f"# writer {slot} on {base}\n", base)

        barrier.wait()
        try:
            outcomes[slot] = anyio.run(write)
        except VersionConflictError as exc:
            outcomes[slot] = exc

    threads = [threading.Thread(target=writer, args=(slot,)) for slot in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return outcomes


@pytest.mark.parametrize("kind", [FileKind.SOUL, FileKind.MEMORY])
def test_the_loser_of_a_race_is_told_the_version_that_won(
    open_runtime: Callable[[], Memstrata], kind: FileKind
) -> None:
    mem = open_runtime()
    first = anyio.run(mem.sync.frontend_edit, "race", kind, "# start\n")
    base = first.version
    for _ in range(ROUNDS):
        outcomes = _race(mem, "race", kind, base)
        won = [o for o in outcomes if isinstance(o, MemoryFile)]
        lost = [o for o in outcomes if isinstance(o, VersionConflictError)]
        assert len(won) == 1 and len(lost) == 1, outcomes
        stored = mem.store.get_memory_file("race", kind)
        assert stored is not None and stored.version == won[0].version == base + 1
        assert (lost[0].expected, lost[0].actual) == (base, stored.version)
        assert f"found version {stored.version}" in str(lost[0])
        base = stored.version
