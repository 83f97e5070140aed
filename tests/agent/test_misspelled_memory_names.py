"""A guarded file tool writing a root file whose name only looks like a memory file's
(``memory.md``, ``MEMROY.md``, ``agents.md`` on a case-sensitive sandbox): the write passes
through untouched and the answer says which file the memory is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memstrata.agent.file_guard import GuardedFileTools
from memstrata.agent.session import open_agent_session
from memstrata.agent.tools import ToolContext
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.base import DEFAULT_WORKSPACE_PREFIXES, normalise_sandbox_path
from memstrata.sandbox.local import LocalDirectorySandbox
from memstrata.sandbox.lookalike import lookalike_memory_file
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import user_md
from tests.sandbox.support import USER, FaultySandbox

pytestmark = pytest.mark.anyio


def platform_write_file(root: Path) -> Any:
    """A platform's own write_file under the sandbox root, knowing nothing of memory."""

    async def write_file(path: str, content: str) -> str:
        relative = normalise_sandbox_path(path)
        assert relative is not None
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return f"wrote {path}"

    return write_file


@pytest.fixture
async def guarded(sync: SyncService) -> GuardedFileTools:
    session = await open_agent_session(sync, USER, session_id="s1", token_limit=50_000)
    assert session.file_tools.case_sensitive is True  # a Linux directory
    return session.file_tools


CASE = "names are case-sensitive"
SPELLING = "check the spelling"


@pytest.mark.parametrize(
    ("path", "memory_file", "why"),
    [
        ("memory.md", "MEMORY.md", CASE),
        ("MEMORY.MD", "MEMORY.md", CASE),
        ("/workspace/User.md", "USER.md", CASE),
        ("MEMROY.md", "MEMORY.md", SPELLING),
        ("./memroy.md", "MEMORY.md", SPELLING),
        ("MEMORYY.md", "MEMORY.md", SPELLING),
        ("SOLU.md", "SOUL.md", SPELLING),
        ("USERS.md", "USER.md", SPELLING),
        ("agents.md", "AGENTS.md", CASE),
        ("AGENT.md", "AGENTS.md", SPELLING),
    ],
)
async def test_a_lookalike_name_passes_through_with_a_note(
    guarded: GuardedFileTools, store: MemoryStore, path: str, memory_file: str, why: str
) -> None:
    box = guarded.ctx.sandbox
    assert isinstance(box, LocalDirectorySandbox)
    before = user_md(store)

    answer = await guarded.wrap(platform_write_file(box.root))(path=path, content="x\n")

    relative = normalise_sandbox_path(path)
    assert relative is not None
    note = (
        f"note: {relative} is not AGENTS.md, the platform's read-only rules ({why}); put what "
        "you want to keep in MEMORY.md"
        if memory_file == "AGENTS.md"
        else f"note: {relative} is not your memory file; {memory_file} is ({why})"
    )
    assert answer == f"wrote {path}\n{note}"
    assert (box.root / relative).read_text() == "x\n"
    assert guarded.ctx.tracker.dirty == frozenset()  # not memory: nothing synced
    assert user_md(store) == before


@pytest.mark.parametrize(
    "path",
    [
        "notes.md",  # not near any name
        "OUR.md",  # two edits from SOUL.md: too many for a four-letter name
        "MEMORY.txt",  # not Markdown
        "notes/memory.md",  # not at the root
        "/tmp/MEMORY.md",  # not in the sandbox
        "README.md",
        "MEMORY.md.bak",
    ],
)
async def test_other_names_pass_through_without_a_note(
    guarded: GuardedFileTools, path: str
) -> None:
    assert lookalike_memory_file(path, case_sensitive=True) is None
    calls: list[str] = []

    async def write_file(path: str, content: str) -> str:
        calls.append(path)
        return "done"

    assert await guarded.wrap(write_file)(path, "x") == "done"
    assert calls == [path]


async def test_the_memory_file_itself_gets_no_note(
    guarded: GuardedFileTools, store: MemoryStore
) -> None:
    box = guarded.ctx.sandbox
    assert isinstance(box, LocalDirectorySandbox)
    answer = await guarded.wrap(platform_write_file(box.root))("USER.md", "- Name: Ada\n")
    assert answer == "wrote USER.md"
    assert user_md(store)[0] == "- Name: Ada\n"


async def test_on_a_case_insensitive_sandbox_a_case_variant_is_the_file_itself(
    sync: SyncService, user_box: LocalDirectorySandbox, store: MemoryStore
) -> None:
    assert lookalike_memory_file("memory.md", case_sensitive=False) is None  # it is MEMORY.md
    assert lookalike_memory_file("agents.md", case_sensitive=False) is None  # refused instead
    assert lookalike_memory_file("AGENT.md", case_sensitive=False) == "AGENTS.md"
    await sync.start_session(USER)
    folding = FaultySandbox(user_box)
    folding.case_sensitive = False  # a case-insensitive mount
    tracker = await sync.begin_round(USER, sandbox=folding)
    write = GuardedFileTools(ToolContext.bind(USER, sync, folding, tracker=tracker)).wrap(
        platform_write_file(user_box.root)
    )

    assert await write("MEMROY.md", "x\n") == (
        "wrote MEMROY.md\nnote: MEMROY.md is not your memory file; MEMORY.md is (check the "
        "spelling)"
    )
    assert await write("USER.md", "- Name: Ada\n") == "wrote USER.md"  # the file itself
    assert user_md(store)[0] == "- Name: Ada\n"


async def test_a_non_string_answer_is_returned_as_it_is(guarded: GuardedFileTools) -> None:
    async def write_file(path: str, content: str) -> dict[str, int]:
        return {"bytes": len(content)}

    assert await guarded.wrap(write_file)(path="memory.md", content="abc") == {"bytes": 3}


async def test_workspace_prefixes_are_the_sandbox_s() -> None:
    assert lookalike_memory_file("/workspace/memory.md", case_sensitive=True) == "MEMORY.md"
    assert lookalike_memory_file("/home/me/memory.md", case_sensitive=True) is None
    assert (
        lookalike_memory_file(
            "/home/me/memory.md",
            case_sensitive=True,
            workspace_prefixes=(*DEFAULT_WORKSPACE_PREFIXES, "/home/me"),
        )
        == "MEMORY.md"
    )
