"""``memory_write`` is a model's whole-file write, so it refuses text that would leave a
code fence or an HTML block that only its end ends (``<!--``) open, with the agent tools'
rule and words (``update_long_term_memory`` with ``whole_file``), through the SDK's
in-process client on the real runtime; each refusal is checked to have written nothing."""

from __future__ import annotations

import pytest

from memstrata.memory.kinds import USER_FILE_KINDS, FileKind
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_tools import ok, refused, stored, text

pytestmark = pytest.mark.anyio

OPEN = "# MEMORY\n\n## Decisions\n```python\nprint('hi')\n\n## Lessons\n- keep notes\n"
CLOSED = "# MEMORY\n\n## Decisions\n```python\nprint('hi')\n```\n\n## Lessons\n- keep notes\n"


def open_fence(fence: str, line: int, file: str) -> str:
    return (
        f"error: content opens a {fence} fence on line {line} that it never closes, so "
        f"everything after it in {file}, later sections too, would read as code; close it "
        f"with a line of {fence} after the code, or remove it"
    )


def open_html(number: int, opening: str, end: str, file: str) -> str:
    # An HTML block only its end ends ("<!--" to "-->") runs to the end as a fence does.
    return (
        f"error: content opens an HTML block on line {number} ({opening!r}) that it never "
        f"closes, so everything after it in {file}, later sections too, would read as part "
        f"of it; add the closing {end} after it, or remove it"
    )


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("memory", OPEN, open_fence("```", 4, "MEMORY.md")),
        (
            "memory",
            "# MEMORY\n\n## Decisions\n<!-- old\n\n## Lessons\n- keep notes\n",
            open_html(4, "<!-- old", "-->", "MEMORY.md"),
        ),
        ("soul", "Be brief.\n<style>\np {}\n", open_html(2, "<style>", "</style>", "SOUL.md")),
        ("user", "# USER\n\n## Profile\n~~~\n- Name: Alice\n", open_fence("~~~", 4, "USER.md")),
        ("soul", "```\n", open_fence("```", 1, "SOUL.md")),
        # A closing fence must be at least as long as the opening one.
        ("memory", "````\ncode\n```\n", open_fence("````", 1, "MEMORY.md")),
    ],
)
async def test_an_open_fence_is_refused_and_nothing_is_written(
    connect: ClientFactory, mem: Memstrata, name: str, content: str, message: str
) -> None:
    async with connect("alice") as client:
        read = (await ok(client, "memory_read", {"name": name})).structured_content
        assert read is not None
        before = {kind: stored(mem, "alice", kind) for kind in USER_FILE_KINDS}
        arguments = {"name": name, "content": content, "expected_version": read["version"]}
        result = await client.call_tool("memory_write", arguments)
    assert result.is_error and text(result) == message
    # A code as the other content refusals have (docs/MCP.md, "Errors").
    assert result.structured_content == {"error": "unclosed_block"}
    assert {kind: stored(mem, "alice", kind) for kind in USER_FILE_KINDS} == before


async def test_the_refusal_is_the_agent_tools_own(connect: ClientFactory, mem: Memstrata) -> None:
    """One rule: the whole-file write of the agent tools refuses the same text in the same
    words."""
    async with connect("alice") as client:
        read = (await ok(client, "memory_read", {"name": "memory"})).structured_content
        assert read is not None
        written = await refused(
            client,
            "memory_write",
            {"name": "memory", "content": OPEN, "expected_version": read["version"]},
        )
        updated = await client.call_tool(
            "update_long_term_memory", {"content": OPEN, "whole_file": True}
        )
    assert updated.is_error
    assert text(updated) == written


async def test_closed_fences_are_written(connect: ClientFactory, mem: Memstrata) -> None:
    async with connect("alice") as client:
        read = (await ok(client, "memory_read", {"name": "memory"})).structured_content
        assert read is not None
        arguments = {"name": "memory", "content": CLOSED, "expected_version": read["version"]}
        result = await ok(client, "memory_write", arguments)
    assert result.structured_content == {"name": "memory", "file_type": "memory_md", "version": 2}
    assert stored(mem, "alice", FileKind.MEMORY) == (CLOSED, 2)
