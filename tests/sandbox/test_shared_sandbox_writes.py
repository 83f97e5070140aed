"""A controlled write on a sandbox another open session shares keeps the copies its agent
may have read.

Sessions without a ``session_id`` share the user's sandbox. A controlled write's sync
(``AGENT_WRITE``) settles the base record when the copy equals the DB, and its write-back
records a new base: either forgot the copies an agent of another session still open there
may have read — before a person's edit was pushed, or before this write. That agent's
whole-file write of its older copy was then read as an edit of the new one and stored over
the person's edit and the memory tool's entry. While another session holds the sandbox (the
rule a session start asks, ``SHARED``), the copies stay: the later whole-file write is
merged from the copy it was composed from, or kept aside.

Real database, real directory sandboxes, the real runtime (BM25 only).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from memstrata.memory.conflicts import list_copies, read_copy
from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from memstrata.sandbox import holds
from memstrata.sandbox.local import LocalSandboxProvider

USER = "ada"
TOKENS = 32_000
HUMAN = "- human: chose plan B"
AGENT = "- agent: wrote its whole file"
ENTRY = "the memory tool's entry"


async def kept_aside(mem: Memstrata) -> list[str]:
    page = await list_copies(mem.sandboxes, USER)
    return [(await read_copy(mem.sandboxes, USER, c.copy.name)).content for c in page.copies]


@pytest.mark.parametrize("pushed", [True, False], ids=["after a push", "no push"])
@pytest.mark.parametrize("writer", ["this process", "another process"])
def test_a_controlled_write_keeps_the_copy_another_open_session_read(
    writer: str, pushed: bool, open_runtime: Callable[..., Memstrata]
) -> None:
    mem = open_runtime()
    other = mem if writer == "this process" else open_runtime()

    async def run() -> None:
        reader = await mem.open_agent_session(USER, token_limit=TOKENS)
        copy = mem.sandbox_directory(USER) / FileKind.MEMORY.filename
        read_by_reader = copy.read_text()  # the reader's agent reads the file
        writer_session = await other.open_agent_session(USER, token_limit=TOKENS)
        if pushed:  # a person's edit, pushed into the shared sandbox
            stored, _ = await mem.sync.read_file(USER, FileKind.MEMORY)
            edited = stored.content + HUMAN + "\n"
            await mem.sync.frontend_edit(USER, FileKind.MEMORY, edited, stored.version)
        answer = await writer_session.tools.record_memory(ENTRY)
        assert not answer.failed, answer
        copy.write_text(read_by_reader + AGENT + "\n")  # composed before both writes
        reader.on_tool_call("write_file", {"path": FileKind.MEMORY.filename})

        await reader.end_round()

        content = (await mem.sync.read_file(USER, FileKind.MEMORY))[0].content
        assert ENTRY in content, content
        assert not pushed or HUMAN in content, content
        kept = AGENT in content or any(AGENT in text for text in await kept_aside(mem))
        assert kept, content
        reader.close()
        writer_session.close()

    asyncio.run(run())


def test_a_controlled_write_alone_on_its_sandbox_still_settles(
    open_runtime: Callable[..., Memstrata],
) -> None:
    """No other session open: the write settles the base as before, so the agent's own
    whole-file rewrite of the copy it just wrote is an edit, stored (not kept aside)."""
    mem = open_runtime()

    async def run() -> None:
        session = await mem.open_agent_session(USER, token_limit=TOKENS)
        copy = mem.sandbox_directory(USER) / FileKind.MEMORY.filename
        stored, _ = await mem.sync.read_file(USER, FileKind.MEMORY)
        await mem.sync.frontend_edit(
            USER, FileKind.MEMORY, stored.content + HUMAN + "\n", stored.version
        )
        assert not (await session.tools.record_memory(ENTRY)).failed
        copy.write_text(copy.read_text().replace(HUMAN, "- human: chose plan C"))
        session.on_tool_call("write_file", {"path": FileKind.MEMORY.filename})

        await session.end_round()

        content = (await mem.sync.read_file(USER, FileKind.MEMORY))[0].content
        assert ("plan C" in content, "plan B" in content, ENTRY in content) == (True, False, True)
        assert await kept_aside(mem) == []
        session.close()

    asyncio.run(run())


def test_a_memory_tools_whole_file_rewrite_on_a_shared_sandbox_is_stored(
    open_runtime: Callable[..., Memstrata],
) -> None:
    """The shared record keeps the copies a push replaced, but the memory tool edits
    exactly the copy its refresh left (``EditedBase``): its whole-file rewrite is its own
    edit, stored as asked, never merged from an older copy nor kept aside."""
    mem = open_runtime()

    async def run() -> None:
        reader = await mem.open_agent_session(USER, token_limit=TOKENS)
        writer = await mem.open_agent_session(USER, token_limit=TOKENS)
        stored, _ = await mem.sync.read_file(USER, FileKind.MEMORY)
        await mem.sync.frontend_edit(
            USER, FileKind.MEMORY, stored.content + HUMAN + "\n", stored.version
        )

        answer = await writer.tools.update_long_term_memory(
            "# Memory\n\n## Decisions\n- only this\n", whole_file=True
        )

        assert not answer.failed, answer
        content = (await mem.sync.read_file(USER, FileKind.MEMORY))[0].content
        assert content == "# Memory\n\n## Decisions\n- only this\n"
        assert await kept_aside(mem) == []
        reader.close()
        writer.close()

    asyncio.run(run())


def test_a_hold_tells_another_hold_from_its_own(tmp_path: Path) -> None:
    """The local provider's hold answers whether any other hold — another start's in this
    process (another descriptor) — holds the sandbox, never counting itself."""
    provider = LocalSandboxProvider(tmp_path)

    async def run() -> None:
        first = await provider.hold_session(USER, None)
        assert first is not None
        alone = holds.others_hold(first)
        second = await provider.hold_session(USER, None)
        assert second is not None
        together = (holds.others_hold(first), holds.others_hold(second))
        second()
        after = holds.others_hold(first)
        first()
        assert (alone, together, after, holds.others_hold(first)) == (
            False,
            (True, True),
            False,
            False,
        )

    asyncio.run(run())
