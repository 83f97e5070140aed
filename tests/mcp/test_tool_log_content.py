"""The ``mcp.tool`` line carries no word of a user's memory: tool, user, outcome, the
error's code and kind, sizes and duration only.

Before, a failed call's line logged ``message``, the answer's text cut at 200 characters,
and the answers name the file's sections and quote its lines ("… is set under ## <heading>",
the sections a rewrite would remove): a user's headings reached the operator's log, the
leak ``agent.tool.refused`` had closed for the agent tools' other callers. Through the
SDK's in-process client on the real runtime; the marker is a heading of the user's own
MEMORY.md, never in an argument of the calls that follow its write.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from memstrata.logs import event_fields
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_tools import ok, refused, text

pytestmark = pytest.mark.anyio

MARKER = "Quillborough"
MEMORY = (
    f"# MEMORY\n\n## {MARKER} Harbour Plans\n\n- Moor the yawl at {MARKER} pier 9\n"
    "- Paint the hull\n"
)


def leaks(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every captured record, its message and its fields, that holds the marker."""
    found = []
    for record in caplog.records:
        said = f"{record.getMessage()} {event_fields(record)}"
        if MARKER.lower() in said.lower():
            found.append(f"{record.levelname} {record.name}: {said}")
    return found


def tool_events(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    events = [event_fields(r) | {"level": r.levelno} for r in caplog.records]
    return [e for e in events if e.get("event") == "mcp.tool"]


async def test_no_tool_line_carries_the_users_headings(
    connect: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    async with connect("log-quill") as client:
        read = await ok(client, "memory_read", {"name": "memory"})
        version = read.structured_content["version"]  # type: ignore[index]
        written = {"name": "memory", "content": MEMORY, "expected_version": version}
        written["replace_all"] = True  # the template's sections go
        version = (await ok(client, "memory_write", written)).structured_content["version"]  # type: ignore[index]
        caplog.clear()
        caplog.set_level(logging.DEBUG, logger="memstrata")
        # Successes whose answers hold the heading.
        assert MARKER in text(await ok(client, "memory_read", {"name": "memory"}))
        found = await ok(client, "memory_search", {"query": "yawl pier", "top_k": 3})
        assert MARKER in text(found)
        # Refusals whose answers name it: a section named nearly as it is, a whole-file
        # rewrite that would remove it, an entry to replace that the file does not have.
        answers = [
            await refused(
                client,
                "update_long_term_memory",
                {"section": "Quilborough Harbour Plans", "content": "- Sand the deck"},
            ),
            await refused(
                client,
                "memory_write",
                {"name": "memory", "content": "# MEMORY\n", "expected_version": version},
            ),
            await refused(
                client,
                "record_memory",
                {"content": "Moor the yawl at pier 4", "replaces": "Moor the dinghy"},
            ),
        ]
    assert all(MARKER in said for said in answers), answers
    assert leaks(caplog) == []
    events = tool_events(caplog)
    assert [(e["tool"], e["error"]) for e in events] == [
        ("memory_read", False),
        ("memory_search", False),
        ("update_long_term_memory", True),
        ("memory_write", True),
        ("record_memory", True),
    ]
    # What the line says of a refusal instead: its code, at INFO (the caller's to fix).
    refusals = events[2:]
    assert all(e["level"] == logging.INFO and e["user_id"] == "log-quill" for e in refusals)
    assert refusals[1]["code"] == "would_remove_most"
    assert all(e["code"] for e in refusals), refusals
    assert all("message" not in e for e in events), events
