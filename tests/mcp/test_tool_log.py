"""A failed tool call's ``mcp.tool`` log line says why: the error code of its structured
result (when it has one) and its message, cut short; a refusal — the caller's to fix — at
INFO, any other failure at WARNING. Through the SDK's in-process client on the real
runtime."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from memstrata.logs import event_fields
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_tools import ok, refused

pytestmark = pytest.mark.anyio

LOGGED_MESSAGE_CHARS = 200  # memstrata.mcp.failure_answers.LOGGED_MESSAGE_CHARS


def tool_events(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    events = [event_fields(r) | {"level": r.levelno} for r in caplog.records]
    return [e for e in events if e.get("event") == "mcp.tool"]


async def test_a_stale_version_is_logged_with_its_code_and_message(
    connect: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memstrata")
    async with connect("alice") as client:
        await ok(client, "memory_read", {"name": "user"})
        caplog.clear()
        said = await refused(
            client, "memory_write", {"name": "user", "content": "# USER\n", "expected_version": 7}
        )
    [event] = tool_events(caplog)
    assert event["level"] == logging.INFO  # the caller's to fix: re-read, write again
    assert (event["tool"], event["user_id"], event["error"]) == ("memory_write", "alice", True)
    assert event["code"] == "version_conflict"
    assert event["message"].startswith("version conflict on USER.md: expected version 7")
    assert said == "error: " + event["message"]


async def test_a_long_refusal_is_logged_cut_short(
    connect: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memstrata")
    async with connect("alice") as client:
        await ok(client, "memory_read", {"name": "user"})
        caplog.clear()
        said = await refused(
            client, "memory_write", {"name": "user", "content": "# USER\n", "expected_version": 1}
        )
    [event] = tool_events(caplog)
    assert (event["level"], event["code"]) == (logging.INFO, "would_remove_most")
    # The message is the client's, cut at the bound with "…".
    assert len(said) > LOGGED_MESSAGE_CHARS + len("error: ")
    message = event["message"]
    assert message.endswith("…") and len(message) <= LOGGED_MESSAGE_CHARS + 1
    assert said.startswith("error: " + message[:-1])


async def test_a_refusal_without_a_code_is_logged_with_its_message(
    connect: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memstrata")
    async with connect("alice") as client:
        said = await refused(client, "memory_search", {"query": "tea", "top_k": 99})
    [event] = tool_events(caplog)
    assert event["level"] == logging.INFO
    assert "code" not in event
    assert event["message"] == said.removeprefix("error: ")
    assert "top_k" in event["message"]


async def test_an_open_fence_is_logged_with_its_code(
    connect: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memstrata")
    async with connect("alice") as client:
        await ok(client, "memory_read", {"name": "memory"})
        caplog.clear()
        await refused(
            client, "memory_write", {"name": "memory", "content": "```\n", "expected_version": 1}
        )
    [event] = tool_events(caplog)
    assert (event["level"], event["code"]) == (logging.INFO, "unclosed_block")


async def test_an_agent_write_tool_failure_stays_a_warning_with_its_message(
    connect: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """The agent tools' answer does not say whose failure it was (a bad argument, or
    storage unreachable), so it is not made quieter."""
    caplog.set_level(logging.INFO, logger="memstrata")
    async with connect("alice") as client:
        said = await refused(client, "record_memory", {"section": "Notes"})
    [event] = tool_events(caplog)
    assert event["level"] == logging.WARNING
    assert event["message"] == said.removeprefix("error: ")
    assert "content" in event["message"]


async def test_a_success_logs_no_message(
    connect: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memstrata")
    async with connect("alice") as client:
        await ok(client, "skills_list", {})
    [event] = tool_events(caplog)
    assert event["level"] == logging.INFO and event["error"] is False
    assert "message" not in event and "code" not in event


async def test_an_agent_write_tool_failure_is_logged_once(
    connect: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """mcp.tool alone: the agent tools' own agent.tool.refused is for the other callers."""
    caplog.set_level(logging.DEBUG, logger="memstrata")
    async with connect("alice") as client:
        await refused(client, "update_user", {"section": "Profile", "content": "x" * 300_000})
    events = [event_fields(r).get("event") for r in caplog.records]
    assert events.count("mcp.tool") == 1
    assert "agent.tool.refused" not in events
