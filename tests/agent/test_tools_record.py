"""record_memory against a real DB and real sandbox directories: dated entries, new
sections, parallel calls, edits racing it from the frontend and other sessions."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from memstrata.agent.tools import MemoryTools, ToolContext
from memstrata.db.database import Database
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory
from tests.agent.tool_support import DAY
from tests.sandbox.support import USER, embedding_rows, read_only_state

pytestmark = pytest.mark.anyio


# -- record_memory ---------------------------------------------------------------------------


async def test_record_memory_appends_a_dated_entry_and_syncs(
    tools: MemoryTools,
    store: MemoryStore,
    templates: TemplateSet,
    user_box: LocalDirectorySandbox,
    db: Database,
) -> None:
    result = await tools.record_memory("Use PostgreSQL for everything", section="Decisions")

    assert result == "Recorded in MEMORY.md under ## Decisions (version 2)."
    expected = templates.load(FileKind.MEMORY).replace(
        "## Decisions\n", "## Decisions\n- 2026-03-01: Use PostgreSQL for everything\n"
    )
    assert memory(store) == (expected, 2)
    assert await user_box.read_text("MEMORY.md") == expected
    assert tools.ctx.tracker.dirty == frozenset({"MEMORY.md"})
    assert any("Use PostgreSQL" in row[2] for row in embedding_rows(db, USER))


async def test_record_memory_creates_a_missing_section_and_indents_more_lines(
    tools: MemoryTools, store: MemoryStore, templates: TemplateSet
) -> None:
    result = await tools.call("record_memory", json.dumps({"content": "line one\n\nline two\n"}))
    assert result == "Recorded in MEMORY.md under ## Notes (version 2)."
    expected = templates.load(FileKind.MEMORY).rstrip("\n") + (
        "\n\n## Notes\n- 2026-03-01: line one\n  line two\n"
    )
    assert memory(store) == (expected, 2)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        (
            {"content": "  "},
            "error: content must not be empty; to remove an entry, pass its text as replaces "
            "with empty content",
        ),
        ({"content": "x" * 2001}, "error: content is 2001 characters; the limit is 2000"),
        (
            {"content": "x", "section": "a\nb"},
            "error: section must be one line, but it has a line break ('\\n'); give just the "
            "name, such as 'Decisions', and put anything more in content",
        ),
        (
            {"content": "x", "section": "x" * 81},
            "error: section must be one line of at most 80 characters",
        ),
        (
            {"content": "x", "section": "##"},
            "error: section must be a non-empty string such as 'Decisions'",
        ),
        ({"content": 7}, "error: content must be a string"),
        (
            {"content": "a\x00b"},
            "error: content must not contain NUL characters ('\\x00' at character 2)",
        ),
    ],
)
async def test_record_memory_validates_and_writes_nothing(
    kwargs: dict[str, Any], error: str, tools: MemoryTools, store: MemoryStore
) -> None:
    assert await tools.record_memory(**kwargs) == error
    assert memory(store)[1] == 1


async def test_record_memory_refuses_a_lone_surrogate(
    tools: MemoryTools, store: MemoryStore
) -> None:
    # Valid JSON ("\\ud83d") decodes to a str that cannot be written as UTF-8.
    result = await tools.call("record_memory", '{"content": "hi \\ud83d there"}')
    assert result == (
        "error: content is not valid Unicode: it contains a lone surrogate ('\\ud83d' at "
        "character 4)"
    )
    assert memory(store)[1] == 1


async def test_parallel_tool_calls_keep_every_entry(tools: MemoryTools, store: MemoryStore) -> None:
    # MCP clients call tools concurrently; each call reads, edits and writes the sandbox copy.
    # Without the user's lock around all of it, the calls read the same text and all but
    # one or two entries were lost while every call reported success.
    results: list[str] = []

    async def record(i: int) -> None:
        results.append(await tools.record_memory(f"parallel entry {i}"))

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(record, i)

    assert all(r.startswith("Recorded in MEMORY.md") for r in results), results
    content, version = memory(store)
    assert [i for i in range(8) if f"parallel entry {i}\n" not in content] == []
    assert version == 9


async def test_a_frontend_edit_between_a_tools_read_and_write_keeps_both(
    tools: MemoryTools,
    sync: SyncService,
    store: MemoryStore,
    templates: TemplateSet,
    user_box: LocalDirectorySandbox,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    human = templates.load(FileKind.MEMORY).replace("## Decisions\n", "## Decisions (human)\n")
    frontend_done = anyio.Event()
    write = user_box.write_text

    async def slow_write(path: str, content: str) -> None:
        # The tool has read its copy; let the frontend edit land, mirror included, if the
        # tool call lets it in (it used to: the mirror then left base == DB, and the tool's
        # text, edited from the old copy, overwrote the human's edit as "sandbox wins").
        with anyio.move_on_after(1.0):
            await frontend_done.wait()
        await write(path, content)

    monkeypatch.setattr(user_box, "write_text", slow_write)

    async def frontend() -> None:
        await anyio.sleep(0.1)
        await sync.frontend_edit(USER, "memory", human)
        frontend_done.set()

    results: list[str] = []

    async def agent() -> None:
        results.append(await tools.record_memory("agent entry"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(agent)
        tg.start_soon(frontend)

    content, _ = memory(store)
    assert "## Decisions (human)\n" in content
    assert "agent entry\n" in content, results


async def test_two_sessions_of_one_user_each_record_a_memory(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    # Session B's sandbox still holds the round-start copy when A's entry lands; B's append
    # at the same place was a three-way conflict, refused as "the user edited MEMORY.md".
    boxes = {}
    tools = {}
    for s in ("A", "B"):
        await sync.start_session(USER, s)
        boxes[s] = provider.for_user(USER, s)
        tracker = await sync.begin_round(USER, s)
        ctx = ToolContext.bind(USER, sync, boxes[s], session_id=s, tracker=tracker)
        tools[s] = MemoryTools(ctx, today=lambda: DAY)

    first = await tools["A"].record_memory("likes tea")
    second = await tools["B"].record_memory("has a dog named Rex")

    assert first.startswith("Recorded") and second.startswith("Recorded"), (first, second)
    content, version = memory(store)
    assert "likes tea\n" in content and "Rex\n" in content
    assert version == 3
    assert await boxes["B"].read_text("MEMORY.md") == content


async def test_a_second_write_in_a_round_without_base_records(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    # With .memstrata/ unwritable the round-start snapshot is the only base; controlled
    # writes never advanced it, so the second entry of a round read as a clash with the user.
    faulty = read_only_state(provider)
    no_state = SyncService(store, faulty)
    await no_state.start_session(USER)
    tracker = await no_state.begin_round(USER)
    ctx = ToolContext.bind(USER, no_state, faulty.for_user(USER), tracker=tracker)
    tools = MemoryTools(ctx, today=lambda: DAY)

    first = await tools.record_memory("first fact")
    second = await tools.record_memory("second fact")

    assert first.startswith("Recorded") and second.startswith("Recorded"), (first, second)
    content, _ = memory(store)
    assert "first fact\n" in content and "second fact\n" in content
