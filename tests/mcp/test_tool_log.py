"""A failed tool call's ``mcp.tool`` log line says why by code and kind: the error code of
its structured result (or the agent tool's cause) and the class of what refused it, none
of the answer's words (``test_tool_log_content``); a refusal — the caller's to fix — at
INFO, any other failure at WARNING. Through the SDK's in-process client on the real
runtime."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError
from sqlalchemy.exc import OperationalError

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.runtime import Memstrata
from memstrata.sandbox.local import LocalSandboxProvider
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_tools import ok, refused
from tests.sandbox.support import FaultyProvider

pytestmark = pytest.mark.anyio


def tool_events(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    events = [event_fields(r) | {"level": r.levelno} for r in caplog.records]
    return [e for e in events if e.get("event") == "mcp.tool"]


async def test_a_stale_version_is_logged_with_its_code_and_kind(
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
    assert (event["code"], event["kind"]) == ("version_conflict", "VersionConflictError")
    assert "message" not in event
    assert said.startswith("error: version conflict on USER.md: expected version 7")
    assert event["answer_chars"] == len(said)


async def test_a_long_refusal_logs_its_code_not_its_words(
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
    # The answer names the file's sections (the user's words); the line, its size only.
    assert "Preferences" in said and "Preferences" not in str(event)
    assert event["answer_chars"] == len(said)


async def test_a_refusal_without_a_code_is_logged_with_its_kind(
    connect: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memstrata")
    async with connect("alice") as client:
        said = await refused(client, "memory_search", {"query": "tea", "top_k": 99})
    [event] = tool_events(caplog)
    assert event["level"] == logging.INFO
    assert "code" not in event and "message" not in event
    assert event["kind"] == "ToolInputError"
    assert "top_k" in said


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


async def test_an_agent_write_tools_refusal_is_info_with_its_cause(
    connect: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Bad arguments to an agent write tool are the caller's to fix, as any refusal:
    ``ToolAnswer.part_failed`` tells them from a part's failure."""
    caplog.set_level(logging.INFO, logger="memstrata")
    async with connect("alice") as client:
        said = await refused(client, "record_memory", {"section": "Notes"})
    [event] = tool_events(caplog)
    assert (event["level"], event["code"]) == (logging.INFO, "invalid_arguments")
    assert "message" not in event
    assert "content" in said


async def test_an_agent_write_tools_part_failure_stays_a_warning(
    connect: ClientFactory,
    mem: Memstrata,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The database refuses the entry's write (the fault injected): a part failed, not
    the input; the entry is kept in the workspace copy for the next call."""
    async with connect("alice") as client:
        await ok(client, "memory_read", {"name": "memory"})

        def unreachable(*args: object, **kwargs: object) -> None:
            raise OperationalError("UPDATE memory_files", {}, Exception("connection refused"))

        monkeypatch.setattr(mem.store, "upsert_memory_file", unreachable)
        caplog.set_level(logging.INFO, logger="memstrata")
        # memory_read's own line may have been captured already (a level left by an
        # earlier test on this worker): only the refused call's counts
        caplog.clear()
        said = await refused(client, "record_memory", {"content": "Lives in Porto"})
    [event] = tool_events(caplog)
    assert event["level"] == logging.WARNING, (event, said)
    assert "storage is unreachable" in said


async def test_a_refused_request_is_info_and_a_failed_one_a_warning(
    connect: ClientFactory, settings: Settings, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """``mcp.request``: reading a copy that is not there (404) is the caller's; one the
    sandbox cannot read (503) is a part's."""
    copy = "memstrata://conflicts/MEMORY.md.20260301T120000.123456Z.md"
    caplog.set_level(logging.INFO, logger="memstrata")
    async with connect("alice") as client:
        with pytest.raises(MCPError):
            await client.read_resource(copy)
    provider = FaultyProvider(
        LocalSandboxProvider(settings.resolved_sandbox_root), error=OSError(5, "I/O error")
    )
    failing = Memstrata.open(settings, database=db, sandboxes=provider, embedder=None)
    try:
        async with connect("alice", runtime=failing) as client:
            with pytest.raises(MCPError):
                await client.read_resource(copy)
    finally:
        failing.close()
    events = [event_fields(r) | {"level": r.levelno} for r in caplog.records]
    requests = [(e["status"], e["level"]) for e in events if e.get("event") == "mcp.request"]
    assert requests == [(404, logging.INFO), (503, logging.WARNING)]


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
