"""``memory_read`` of part of a file, as a model reads a long MEMORY.md: one ``## `` section
(named as the other tools name sections) or a range of lines, with the file's length, size
and version and how to read the rest; a bad section or range is refused with how to fix
it, and a read without them is the whole file as before. Through the SDK's in-process
client on the real runtime."""

from __future__ import annotations

from typing import Any

import pytest

from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_tools import ok, refused, stored, text

pytestmark = pytest.mark.anyio

MEMORY = """# MEMORY.md

## Decisions
- 2026-02-01: Chose PostgreSQL for billing.
- 2026-02-02: Weekly syncs on Tuesday.

## Ongoing
- 2026-02-03: Migrating billing (deadline: March).
  It runs late.

## Lessons
- 2026-02-05: Ask before deleting data.
"""
SIZE = len(MEMORY.encode("utf-8"))


async def given(mem: Memstrata) -> int:
    return (await mem.sync.frontend_edit("alice", FileKind.MEMORY, MEMORY)).version


async def test_a_section_is_read_with_its_lines_the_files_size_and_how_to_read_on(
    connect: ClientFactory, mem: Memstrata
) -> None:
    version = await given(mem)
    async with connect("alice") as client:
        result = await ok(client, "memory_read", {"name": "memory", "section": "## decisions"})
    part = (
        "## Decisions\n- 2026-02-01: Chose PostgreSQL for billing.\n"
        "- 2026-02-02: Weekly syncs on Tuesday."
    )
    assert text(result) == (
        f"MEMORY.md, version {version}, ## Decisions: lines 3-5 of 12 ({SIZE} bytes in all):"
        f"\n\n{part}\n\n[Not shown: lines 1-2 and 6-12 of 12. memory_read with start_line=6 "
        "reads on; without section, start_line and line_count it reads the whole file.]"
    )
    assert result.structured_content == {
        "name": "memory",
        "file_type": "memory_md",
        "content": part,
        "version": version,
        "read_only": False,
        "section": "Decisions",
        "start_line": 3,
        "end_line": 5,
        "total_lines": 12,
        "total_bytes": SIZE,
    }


@pytest.mark.parametrize(
    ("arguments", "lines", "part", "rest"),
    [
        (
            {"start_line": 8, "line_count": 2},
            "lines 8-9 of 12",
            "- 2026-02-03: Migrating billing (deadline: March).\n  It runs late.",
            "lines 1-7 and 10-12 of 12. memory_read with start_line=10 reads on",
        ),
        (  # a count past the end is cut there
            {"start_line": 11, "line_count": 50.0},
            "lines 11-12 of 12",
            "## Lessons\n- 2026-02-05: Ask before deleting data.",
            "lines 1-10 of 12. memory_read with line_count=10 reads them",
        ),
        ({"line_count": 1}, "line 1 of 12", "# MEMORY.md", "lines 2-12 of 12."),
    ],
)
async def test_a_range_of_lines_is_read(
    connect: ClientFactory,
    mem: Memstrata,
    arguments: dict[str, Any],
    lines: str,
    part: str,
    rest: str,
) -> None:
    version = await given(mem)
    async with connect("alice") as client:
        result = await ok(client, "memory_read", {"name": "MEMORY.md", **arguments})
    head, shown, tail = text(result).split("\n\n")
    assert head == f"MEMORY.md, version {version}: {lines} ({SIZE} bytes in all):"
    assert shown == part
    assert tail.startswith(f"[Not shown: {rest}")


async def test_the_version_of_a_part_is_the_files_for_memory_write(
    connect: ClientFactory, mem: Memstrata
) -> None:
    await given(mem)
    async with connect("alice") as client:
        read = await ok(client, "memory_read", {"name": "memory", "section": "Lessons"})
        assert read.structured_content is not None
        version = read.structured_content["version"]
        new = MEMORY + "- 2026-02-06: Back up first.\n"
        arguments = {"name": "memory", "content": new, "expected_version": version}
        written = await ok(client, "memory_write", arguments)
    assert text(written) == f"Saved MEMORY.md as version {version + 1}."
    assert stored(mem, "alice", FileKind.MEMORY) == (new, version + 1)


async def test_a_read_without_a_part_is_the_whole_file_as_before(
    connect: ClientFactory, mem: Memstrata
) -> None:
    version = await given(mem)
    async with connect("alice") as client:
        result = await ok(client, "memory_read", {"name": "memory", "section": None})
    assert text(result) == f"MEMORY.md, version {version}:\n\n{MEMORY}"
    assert result.structured_content == {
        "name": "memory",
        "file_type": "memory_md",
        "content": MEMORY,
        "version": version,
        "read_only": False,
    }


async def test_part_of_the_read_only_template(connect: ClientFactory, mem: Memstrata) -> None:
    async with connect("alice") as client:
        result = await ok(client, "memory_read", {"name": "agents", "line_count": 1})
    first = mem.templates.agents_md().split("\n")[0]
    head, shown, _ = text(result).split("\n\n")
    assert head.startswith("AGENTS.md (read-only platform template): line 1 of ")
    assert shown == first
    assert result.structured_content is not None
    assert result.structured_content["version"] is None


READ_PART_BAD_INPUT_CASES: list[tuple[dict[str, Any], str]] = [
    (
        {"section": "Decison"},
        "error: MEMORY.md has no ## Decison; did you mean ## Decisions? Its sections: "
        "Decisions, Ongoing, Lessons; pass one of them as section, or leave section out to "
        "read the whole file",
    ),
    (
        {"section": "Travel"},
        "error: MEMORY.md has no ## Travel. Its sections: Decisions, Ongoing, Lessons; pass "
        "one of them as section, or leave section out to read the whole file",
    ),
    (
        {"start_line": 13},
        "error: start_line 13 is past the end of MEMORY.md, which has 12 lines; pass a "
        "start_line from 1 to 12",
    ),
    ({"start_line": 0}, "error: start_line counts from 1 (1: the file's first line); got 0"),
    (
        {"start_line": 3, "line_count": -2},
        "error: line_count counts from 1 (the number of lines to read); got -2",
    ),
    ({"line_count": 0}, "error: line_count counts from 1 (the number of lines to read); got 0"),
    (
        {"section": "Lessons", "start_line": 2},
        "error: pass section, or start_line and/or line_count, not both (a section's answer "
        "gives its line numbers, to read part of it by line)",
    ),
    ({"section": " ## "}, "error: section must be a non-empty string such as 'Decisions'"),
    ({"start_line": 2.5}, "error: start_line must be a JSON integer; got 2.5"),
]


@pytest.mark.parametrize(("arguments", "message"), READ_PART_BAD_INPUT_CASES)
async def test_a_bad_part_is_refused_with_how_to_fix_it(
    connect: ClientFactory, mem: Memstrata, arguments: dict[str, Any], message: str
) -> None:
    await given(mem)
    async with connect("alice") as client:
        assert await refused(client, "memory_read", {"name": "memory", **arguments}) == message


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"section": "Decison"}, "section_not_found"),
        ({"start_line": 13}, "start_line_past_end"),
        ({"start_line": 0}, "invalid_range"),
        ({"start_line": 3, "line_count": -2}, "invalid_range"),
        ({"section": "Lessons", "start_line": 2}, "section_with_range"),
        ({"section": " ## "}, "invalid_section"),
    ],
)
async def test_a_bad_part_says_which_refusal_in_structured_content(
    connect: ClientFactory, mem: Memstrata, arguments: dict[str, Any], code: str
) -> None:
    # A client tells the refusals apart by code, as memory_write's (version_conflict, …).
    await given(mem)
    async with connect("alice") as client:
        result = await client.call_tool("memory_read", {"name": "memory", **arguments})
    assert result.is_error
    assert result.structured_content == {"error": code}


@pytest.mark.parametrize(
    "title",
    [
        "Plans\u200b",  # a zero-width space a person pasted with the name
        "Pla\u202ens",  # a bidi control
        "Plans\tQ1",  # a tab
        "A heading a person wrote that is far longer than the eighty characters a tool name holds",
    ],
)
async def test_a_section_a_person_named_with_what_a_write_refuses_is_read(
    connect: ClientFactory, mem: Memstrata, title: str
) -> None:
    """Writes refuse such a name (it would make a section that looks like another); a read
    must still find the section a person's edit made."""
    content = f"# MEMORY.md\n\n## {title}\n- 2026-02-01: Kick-off.\n\n## Lessons\n- x\n"
    await mem.sync.frontend_edit("alice", FileKind.MEMORY, content)
    async with connect("alice") as client:
        result = await ok(client, "memory_read", {"name": "memory", "section": title})
        write = await client.call_tool(
            "record_memory", {"content": "y", "section": title, "new_section": True}
        )
    assert result.structured_content is not None
    assert result.structured_content["content"] == f"## {title}\n- 2026-02-01: Kick-off."
    assert result.structured_content["section"] == title
    # A write naming it is refused still: by its character, or by the names' length limit.
    assert write.is_error
