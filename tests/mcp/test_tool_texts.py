"""Texts a model reads: the version-conflict refusal names the file as the model knows it
and says what to do once; ``memory_search``'s description says what its answer holds.
Through the SDK's in-process client on the real runtime."""

from __future__ import annotations

import pytest

from memstrata.mcp.server import INSTRUCTIONS
from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_tools import ok, text

pytestmark = pytest.mark.anyio


async def test_a_version_conflict_names_the_file_and_says_what_to_do_once(
    connect: ClientFactory, mem: Memstrata
) -> None:
    async with connect("alice") as client:
        read = (await ok(client, "memory_read", {"name": "soul"})).structured_content
        assert read is not None and read["version"] == 1
        # The user edits SOUL.md on the settings page meanwhile.
        await mem.sync.frontend_edit("alice", FileKind.SOUL, "# SOUL.md\n- Calm.\n", 1)
        content = str(read["content"]) + "- Likes puns.\n"
        arguments = {"name": "soul", "content": content, "expected_version": 1}
        result = await client.call_tool("memory_write", arguments)
    assert result.is_error
    assert text(result) == (
        "error: version conflict on SOUL.md: expected version 1, found version 2. Call "
        "memory_read (name='soul'), apply your change to the text it returns and write again "
        "with expected_version=2."
    )


async def test_memory_search_describes_the_answer_it_gives(connect: ClientFactory) -> None:
    async with connect("alice") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        await ok(client, "record_memory", {"content": "Plays the cello on Sundays"})
        answer = text(await ok(client, "memory_search", {"query": "cello"}))
    description = tools["memory_search"].description or ""
    # The text has a line per hit: where it is from, its date and score, its matching lines.
    assert answer.startswith("1. [MEMORY.md · ") and " · score " in answer
    assert description.endswith(
        " Answers one line per hit: its file or conversation, date and score, and the lines "
        "that match (a note: line when the search was degraded). structuredContent has each "
        "hit's whole text, source ids and per-stage ranks (explain)."
    )


def test_the_instructions_prefer_the_targeted_tools() -> None:
    targeted = INSTRUCTIONS.index("record_memory")
    whole = INSTRUCTIONS.index("memory_write")
    assert targeted < whole
    assert "whole-file rewrite" in INSTRUCTIONS and "replace_all" in INSTRUCTIONS
