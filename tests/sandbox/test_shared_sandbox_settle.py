"""A session start settles the sandbox's base only when no other open session shares it.

A session start on a sandbox whose copy equals the DB forgets the copies earlier pushes
replaced (``Scenario.settles``: its agent reads the copy the start leaves). Sessions
without a ``session_id`` share the user's sandbox: an agent of an earlier session still
open there may have read the file before a person's edit was pushed, and the copies the
record names are what lets its whole-file write be merged from the copy it read. Forgotten
at the later start, that write was stored over the person's edit. The later start now
keeps them while another session holds the sandbox — in this process or in another.

Real database, real directory sandboxes, the real runtime (BM25 only).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from memstrata.memory.conflicts import list_copies, read_copy
from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from memstrata.sandbox.results import Outcome

USER = "ada"
TOKENS = 32_000
HUMAN = "- human: chose plan B"
AGENT = "- agent: wrote its whole file"


async def kept_aside(mem: Memstrata) -> list[str]:
    page = await list_copies(mem.sandboxes, USER)
    return [(await read_copy(mem.sandboxes, USER, c.copy.name)).content for c in page.copies]


@pytest.mark.parametrize("later", ["this process", "another process"])
def test_an_earlier_open_sessions_stale_whole_file_never_overwrites_a_persons_edit(
    later: str, open_runtime: Callable[..., Memstrata]
) -> None:
    mem = open_runtime()
    other = mem if later == "this process" else open_runtime()

    async def run() -> None:
        first = await mem.open_agent_session(USER, token_limit=TOKENS)
        copy = mem.sandbox_directory(USER) / FileKind.MEMORY.filename
        read_by_first = copy.read_text()  # the earlier session's agent reads the file
        stored, _ = await mem.sync.read_file(USER, FileKind.MEMORY)
        edited = stored.content + HUMAN + "\n"  # a person's edit, pushed into the sandbox
        await mem.sync.frontend_edit(USER, FileKind.MEMORY, edited, stored.version)
        second = await other.open_agent_session(USER, token_limit=TOKENS)  # first still open
        copy.write_text(read_by_first + AGENT + "\n")  # composed before the person's edit
        first.on_tool_call("write_file", {"path": FileKind.MEMORY.filename})

        await first.end_round()

        content = (await mem.sync.read_file(USER, FileKind.MEMORY))[0].content
        assert HUMAN in content
        kept = AGENT in content or any(AGENT in text for text in await kept_aside(mem))
        assert kept, content
        first.close()
        second.close()

    asyncio.run(run())


@pytest.mark.parametrize("earlier", ["closed", "still open"])
def test_a_pushed_line_changed_after_a_start_is_an_edit_once_no_other_session_is_open(
    earlier: str, open_runtime: Callable[..., Memstrata]
) -> None:
    """The start settles again when the earlier session has closed: the later agent's
    change of a pushed line is an edit (written). While it is open the start keeps the
    older copies, and the change is read as within the push's session: kept aside, never
    both lines stored."""
    mem = open_runtime()

    async def run() -> None:
        first = await mem.open_agent_session(USER, token_limit=TOKENS)
        if earlier == "closed":
            first.close()
        stored, _ = await mem.sync.read_file(USER, FileKind.MEMORY)
        dog = stored.content + "- Has a dog named Rex\n"
        await mem.sync.frontend_edit(USER, FileKind.MEMORY, dog, stored.version)
        second = await mem.open_agent_session(USER, token_limit=TOKENS)
        copy = mem.sandbox_directory(USER) / FileKind.MEMORY.filename
        copy.write_text(copy.read_text().replace("dog", "cat"))
        second.on_tool_call("edit_file", {"path": FileKind.MEMORY.filename})

        [result] = [r for r in await second.end_round() if r.filename == copy.name]

        content = (await mem.sync.read_file(USER, FileKind.MEMORY))[0].content
        if earlier == "closed":
            assert (result.outcome, "cat" in content, "dog" in content) == (
                Outcome.WRITTEN,
                True,
                False,
            )
        else:
            assert (result.outcome, "cat" in content, "dog" in content) == (
                Outcome.CONFLICT,
                False,
                True,
            )
            assert any("cat named Rex" in text for text in await kept_aside(mem))
        first.close()
        second.close()

    asyncio.run(run())
