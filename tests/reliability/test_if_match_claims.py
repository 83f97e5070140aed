"""Two If-Match writes on the same version in one process: the first comes first.

The second is a 409 at once (no query, no embedding of its own), and a read made while
the first is embedding answers with the version the first stores. The embedding API is the
fault-injection fake in its slow mode, so "while embedding" lasts long enough to look at.
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
    with FaultServer("ok", dim=16) as fake:
        spec = EmbeddingModelSpec(name="fake-model", base_url=fake.base_url)
        mem = Memstrata.open(settings, database=db, embedding_spec=spec)
        try:
            yield mem, fake
        finally:
            mem.close()


def test_second_writer_on_the_same_version_is_a_conflict_at_once(
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
            with pytest.raises(VersionConflictError, match="already under way") as lost:
                await mem.sync.frontend_edit("ana", MEMORY, second, base.version)
            assert time.monotonic() - began < 0.2
            assert lost.value.expected == base.version
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
