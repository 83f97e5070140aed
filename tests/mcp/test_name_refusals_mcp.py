"""Over MCP, a section name or key the file cannot store, or one that shows as another, is
refused before anything is written (no copy kept aside in ``memstrata://conflicts``), and a
section replacement does not drop paragraphs without ``replace_section`` (the drill's
nulsec.py and para.py, as tests)."""

from __future__ import annotations

from typing import Any

import pytest

from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_conflicts_mcp import listing
from tests.mcp.test_tools import ok, refused, stored, text

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("tool", "arguments", "said"),
    [
        (
            "record_memory",
            {"content": "hello", "section": "Plans\x00X"},
            "section must not contain NUL characters ('\\x00' at character 6); give the name "
            "alone in plain text, such as 'Decisions'",
        ),
        (
            "update_long_term_memory",
            {"section": "Plans\x00X", "content": "body", "new_section": True},
            "section must not contain NUL characters",
        ),
        (
            "update_user",
            {"section": "Profile", "key": "Ci\x00ty", "content": "Porto"},
            "key must not contain NUL characters ('\\x00' at character 3); give the name alone "
            "in plain text, such as 'Time zone'",
        ),
        (
            "update_user",
            {"section": "Profile", "key": "City\u202e", "content": "Porto"},
            "key must not contain U+202E RIGHT-TO-LEFT OVERRIDE (a bidirectional control, which "
            "shows the name and the text after it reordered) (character 5)",
        ),
        (
            "update_user",
            {"section": "Profile", "key": "a\x1bb\x07", "content": "Porto"},
            "key must not contain U+001B (a control character or line separator) (character 2)",
        ),
    ],
)
async def test_a_bad_name_is_refused_and_nothing_is_kept_aside(
    connect: ClientFactory, mem: Memstrata, tool: str, arguments: dict[str, Any], said: str
) -> None:
    async with connect("alice") as client:
        await ok(client, "record_memory", {"content": "seed"})
        before = stored(mem, "alice", FileKind.MEMORY), stored(mem, "alice", FileKind.USER)
        message = await refused(client, tool, arguments)
        kept_aside = await listing(client)
    assert message.startswith(f"error: {said}"), message
    assert ".memstrata" not in message
    assert kept_aside["total"] == 0
    assert (stored(mem, "alice", FileKind.MEMORY), stored(mem, "alice", FileKind.USER)) == before


async def test_replacing_a_section_keeps_its_paragraphs_unless_told(
    connect: ClientFactory, mem: Memstrata
) -> None:
    plan = (
        "We agreed to migrate the billing service to Postgres 18 in Q1.\n\n"
        "Budget approved: 40k EUR, owner Dana."
    )
    async with connect("alice") as client:
        await ok(client, "update_long_term_memory", {"section": "Plan", "content": plan})
        before = stored(mem, "alice", FileKind.MEMORY)
        message = await refused(
            client, "update_long_term_memory", {"section": "Plan", "content": ""}
        )
        after_refusal = stored(mem, "alice", FileKind.MEMORY)
        replaced = await ok(
            client,
            "update_long_term_memory",
            {"section": "Plan", "content": "", "replace_section": True},
        )
    assert message == (
        "error: content replaces the whole body of ## Plan, and this one would remove 2 "
        "paragraphs ('We agreed to migrate the billing service to Postgres 18 in Q1.', "
        "'Budget approved: 40k EUR, owner Dana.'). Keep those lines in content, or pass "
        "replace_section=true to remove them; nothing was written"
    )
    assert after_refusal == before
    assert "Removed 2 paragraphs (" in text(replaced)
