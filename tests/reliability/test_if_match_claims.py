"""Two If-Match writes on the same version in one process: the first comes first.

The second is a 409 carrying the version the first stored, once it has (no embedding of
its own), and a read made while the first is embedding answers with that version too. The
embedding API is the fault-injection fake in its slow mode, so "while embedding" lasts long
enough to look at.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import anyio
import pytest

from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.db.database import Database
from memstrata.errors import VersionConflictError
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryFile
from memstrata.runtime import Memstrata
from tests.retrieval.fault_server import FaultServer

pytestmark = pytest.mark.timeout(60)

EMBED_S = 1.0  # the slow fake's delay per text
MEMORY = FileKind.MEMORY


@pytest.fixture
def slow_mem(settings: Settings, db: Database) -> Iterator[tuple[Memstrata, FaultServer]]:
    with FaultServer("ok") as fake:
        spec = EmbeddingModelSpec(name="fake-model", base_url=fake.base_url)
        mem = Memstrata.open(settings, database=db, embedding_spec=spec)
        try:
            yield mem, fake
        finally:
            mem.close()


def test_second_writer_on_the_same_version_is_told_the_version_that_won(
    slow_mem: tuple[Memstrata, FaultServer],
) -> None:
    mem, fake = slow_mem

    async def scenario() -> None:
        base, _ = await mem.sync.read_file("ana", MEMORY)
        fake.delay_s, fake.mode = EMBED_S, "slow"
        requests_before = len(fake.requests)
        landed: list[MemoryFile] = []

        async def first() -> None:
            text = base.content + "- first\n"
            landed.append(await mem.sync.frontend_edit("ana", MEMORY, text, base.version))

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(first)
            await anyio.sleep(0.3)  # the first write is embedding now
            began = time.monotonic()
            second = base.content + "- second\n"
            won = f"found version {base.version + 1}"
            with pytest.raises(VersionConflictError, match=won) as lost:
                await mem.sync.frontend_edit("ana", MEMORY, second, base.version)
            assert (lost.value.expected, lost.value.actual) == (base.version, base.version + 1)
            read, provisioned = await mem.sync.read_file("ana", MEMORY)
            waited = time.monotonic() - began
        assert not provisioned and waited >= 0.3  # the read waited for the write to land
        assert read.version == base.version + 1 and read.content.endswith("- first\n")
        assert [f.version for f in landed] == [base.version + 1]
        # Only the first write embedded: the loser sent nothing to the embedding API.
        sent = [t for r in fake.requests[requests_before:] for t in r.body["input"]]
        assert not any("second" in t for t in sent) and any("first" in t for t in sent)
        stored = mem.store.get_memory_file("ana", MEMORY)
        assert stored is not None and stored.content == read.content

    anyio.run(scenario)


def test_a_failed_claim_is_released_and_the_next_writer_wins(
    slow_mem: tuple[Memstrata, FaultServer],
) -> None:
    mem, _ = slow_mem

    async def scenario() -> None:
        base, _ = await mem.sync.read_file("bo", MEMORY)
        with pytest.raises(VersionConflictError):  # stale: claimed, checked, released
            await mem.sync.frontend_edit("bo", MEMORY, "x\n", base.version + 5)
        with pytest.raises(ValueError):  # bad content: the claim is released too
            await mem.sync.frontend_edit("bo", MEMORY, "nul \x00", base.version)
        written = await mem.sync.frontend_edit("bo", MEMORY, "- kept\n", base.version)
        assert written.version == base.version + 1

    anyio.run(scenario)


class _CountingGets:
    """The real store, counting the reads the sync service makes of it."""

    def __init__(self, mem: Memstrata) -> None:
        self.calls = 0
        self._get = mem.sync.db.get

        async def get(user_id: str, kind: FileKind) -> MemoryFile | None:
            self.calls += 1
            return await self._get(user_id, kind)

        mem.sync.db.get = get  # type: ignore[method-assign]


def test_a_version_older_than_one_seen_here_is_stale_without_a_query(
    slow_mem: tuple[Memstrata, FaultServer],
) -> None:
    mem, _ = slow_mem

    async def scenario() -> None:
        base, _ = await mem.sync.read_file("cy", MEMORY)
        newer = await mem.sync.frontend_edit("cy", MEMORY, "- one\n", base.version)
        gets = _CountingGets(mem)
        with pytest.raises(VersionConflictError) as lost:
            await mem.sync.frontend_edit("cy", MEMORY, "- late\n", base.version)
        assert gets.calls == 0  # answered from the version this process wrote
        assert (lost.value.expected, lost.value.actual) == (base.version, newer.version)
        assert "in_progress" not in str(lost.value) and "under way" not in str(lost.value)
        stored = mem.store.get_memory_file("cy", MEMORY)
        assert stored is not None and stored.content == "- one\n"
        # A version not older than the one seen still goes to the database.
        written = await mem.sync.frontend_edit("cy", MEMORY, "- two\n", newer.version)
        assert gets.calls >= 1 and written.version == newer.version + 1

    anyio.run(scenario)


def test_a_lower_version_read_later_replaces_the_one_seen(
    slow_mem: tuple[Memstrata, FaultServer],
) -> None:
    """The remembered version is the latest observation, not the highest: should the
    stored version ever go down (a restored database), one read heals the shortcut."""
    mem, _ = slow_mem

    async def scenario() -> None:
        base, _ = await mem.sync.read_file("di", MEMORY)
        await mem.sync.frontend_edit("di", MEMORY, "- one\n", base.version)
        with mem.db.engine.begin() as conn:  # the "restore": back to the first version
            conn.exec_driver_sql(
                "UPDATE user_memory SET version = %s WHERE user_id = 'di' AND file_type = %s",
                (base.version, MEMORY.file_type),
            )
        with pytest.raises(VersionConflictError):  # still remembers the newer version
            await mem.sync.frontend_edit("di", MEMORY, "- two\n", base.version)
        read, _ = await mem.sync.read_file("di", MEMORY)
        assert read.version == base.version
        written = await mem.sync.frontend_edit("di", MEMORY, "- two\n", base.version)
        assert written.version == base.version + 1

    anyio.run(scenario)
