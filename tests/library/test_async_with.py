"""``async with Memstrata.open(...) as mem:``, for a platform whose agents run in asyncio:
the block's end drains the edits under way (as docs/LIBRARY.md's "Shutting down" asks),
then closes the runtime in a worker thread, so the event loop goes on running meanwhile.

Before, only ``with`` worked: ``async with`` was a TypeError, and a ``with`` inside a
coroutine closes on the loop (stopping an embedded PostgreSQL takes a tenth of a second
and more), cancelling nothing but stalling every other task.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import anyio
import pytest

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.errors import RuntimeClosedError
from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from tests.retrieval.fault_server import FaultServer

USER = "async-with-user"


@pytest.mark.timeout(180)
def test_the_loop_keeps_running_while_the_block_closes_the_runtime(tmp_path: Path) -> None:
    """A runtime with its own embedded PostgreSQL, opened off the loop as LIBRARY.md shows:
    a ticking task sees the runtime closed while its embedded server is still being
    stopped, which it can only see if ``close()`` runs beside the loop, not on it."""
    settings = Settings(environment="test", data_dir=tmp_path / "data", database_url=None)
    during_close: list[bool] = []  # per tick: was close() half way (refusing, server up)?
    opened: list[Memstrata] = []

    async def tick(stop: asyncio.Event) -> None:
        while not stop.is_set():
            if opened:
                mem = opened[0]
                during_close.append(mem.db_sessions.closed and mem.db.embedded is not None)
            await asyncio.sleep(0.001)

    async def main() -> None:
        stop = asyncio.Event()
        ticker = asyncio.create_task(tick(stop))
        async with await asyncio.to_thread(Memstrata.open, settings, embedder=None) as mem:
            opened.append(mem)
            await asyncio.to_thread(mem.store.provision_default_files, USER)
        stop.set()
        await ticker

    asyncio.run(main())
    [mem] = opened
    assert mem.db.embedded is None  # its own server, stopped by the block's end
    with pytest.raises(RuntimeClosedError):
        mem.list_users()
    assert any(during_close), f"none of {len(during_close)} ticks ran while close() stopped it"


def test_an_exception_in_the_block_closes_the_runtime_and_goes_on(
    db: Database, settings: Settings
) -> None:
    async def main() -> Memstrata:
        async with Memstrata.open(settings, database=db, embedder=None) as mem:
            raise KeyError(mem)  # the host's own error

    with pytest.raises(KeyError) as caught:
        asyncio.run(main())
    [mem] = caught.value.args
    with pytest.raises(RuntimeClosedError):
        mem.list_users()


def test_the_block_lets_a_cancelled_edit_land_before_it_closes(
    db: Database, settings: Settings
) -> None:
    """The drain of LIBRARY.md's shutdown, first: an edit whose caller was cancelled (it
    goes on in a task of its own) is in its passage embedding when the block ends; without
    the drain, close() refused its database write and the person's edit was lost."""
    with FaultServer("slow") as fake:
        fake.delay_s = 0.3  # per text

        async def cut_off_then_leave() -> None:
            async with Memstrata.open(fake.as_api_of(settings), database=db) as mem:
                edit = asyncio.create_task(
                    mem.sync.frontend_edit(USER, FileKind.MEMORY, "Keeps bees in Lyon\n")
                )
                await fake.called()
                edit.cancel()  # e.g. the request that made it was cut off

        asyncio.run(cut_off_then_leave())
    with Memstrata.open(settings, database=db, embedder=None) as after:
        stored = after.store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and "Keeps bees in Lyon" in stored.content


@pytest.mark.timeout(180)
@pytest.mark.parametrize("how", ["anyio cancel scope", "asyncio timeout"])
def test_a_cancellation_while_it_closes_waits_for_the_close(tmp_path: Path, how: str) -> None:
    """Cancelled while it closed (a host's task group shutting down, a timeout), the block
    ended with the runtime refusing calls but its embedded PostgreSQL still stopping in the
    worker thread, which then raced whoever opened the data directory next."""
    settings = Settings(environment="test", data_dir=tmp_path / "data", database_url=None)
    seen: list[tuple[bool, bool]] = []  # right after the block: (closed, server stopped)

    async def in_a_cancel_scope() -> None:
        with anyio.CancelScope() as scope:
            mem = await anyio.to_thread.run_sync(lambda: Memstrata.open(settings, embedder=None))
            async with mem:
                scope.cancel()
        seen.append((mem.db_sessions.closed, mem.db.embedded is None))

    async def in_a_timeout() -> None:
        mem = await asyncio.to_thread(Memstrata.open, settings, embedder=None)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.02), mem:
                pass
        seen.append((mem.db_sessions.closed, mem.db.embedded is None))

    if how == "anyio cancel scope":
        anyio.run(in_a_cancel_scope)
    else:
        asyncio.run(in_a_timeout())
    assert seen == [(True, True)]
