"""Every failed memory tool call leaves one ``agent.tool.refused`` line: INFO when the
caller's input was refused, WARNING when a part failed; its tool and code, never the
answer's words, which name the file's sections and keys and quote the arguments. A
library drill found none at all, even at DEBUG."""

from __future__ import annotations

import json
import logging

import pytest

from memstrata.agent.file_guard import GuardedFileTools
from memstrata.agent.tools import MemoryTools, ToolContext
from memstrata.logs import JsonFormatter, event_fields
from memstrata.memory.kinds import FileKind
from memstrata.memory.templates import TemplateSet
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.sync import SyncService
from tests.agent.tool_support import DAY, FULL_MEMORY, given
from tests.sandbox.support import USER, FaultySandbox, unreachable_store

pytestmark = pytest.mark.anyio

EVENT = "agent.tool.refused"
SECRET = "zebra-4711-secret"


def refusals(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if event_fields(r).get("event") == EVENT]


def only_refusal(caplog: pytest.LogCaptureFixture) -> tuple[int, dict[str, object]]:
    found = refusals(caplog)
    assert len(found) == 1, [event_fields(r) for r in caplog.records]
    text = JsonFormatter().format(found[0])
    assert SECRET not in text and "PostgreSQL 15" not in text  # neither arguments nor file
    return found[0].levelno, json.loads(text)


@pytest.fixture(autouse=True)
def _debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="memstrata")


async def test_malformed_json_arguments(
    tools: MemoryTools, caplog: pytest.LogCaptureFixture
) -> None:
    answer = await tools.call("record_memory", '{"content": "' + SECRET)
    assert answer.failed
    level, line = only_refusal(caplog)
    assert level == logging.INFO
    assert line["tool"] == "record_memory" and line["user_id"] == USER
    assert line["error"] == "invalid_arguments"
    assert "reason" not in line  # the answer's words are not logged


async def test_an_unknown_tool(tools: MemoryTools, caplog: pytest.LogCaptureFixture) -> None:
    await tools.call("forget_everything", {})
    level, line = only_refusal(caplog)
    assert level == logging.INFO
    assert (line["tool"], line["error"]) == ("forget_everything", "unknown_tool")


async def test_an_oversized_update_user(
    tools: MemoryTools, caplog: pytest.LogCaptureFixture
) -> None:
    content = (SECRET + " ") * (300_000 // (len(SECRET) + 1))
    answer = await tools.call("update_user", {"section": "Profile", "content": content})
    assert answer.failed
    level, line = only_refusal(caplog)
    assert level == logging.INFO
    assert (line["tool"], line["error"]) == ("update_user", "refused")


async def test_a_refused_whole_file_write(
    sync: SyncService, tools: MemoryTools, caplog: pytest.LogCaptureFixture
) -> None:
    # A paragraph outside the entries, which a whole-file write may not drop unasked.
    prose = FULL_MEMORY.replace(
        "\n\n## Decisions", "\n\nOps keep us on PostgreSQL 15.\n\n## Decisions"
    )
    await given(sync, FileKind.MEMORY, prose)
    answer = await tools.update_long_term_memory(f"# MEMORY.md\n\n{SECRET}\n", whole_file=True)
    assert answer.failed and "PostgreSQL 15" in answer  # the model is shown what would go
    level, line = only_refusal(caplog)
    assert level == logging.INFO
    assert (line["tool"], line["error"]) == ("update_long_term_memory", "refused")


async def test_the_files_headings_and_keys_stay_out_of_the_line(
    sync: SyncService, tools: MemoryTools, caplog: pytest.LogCaptureFixture
) -> None:
    # Refusals name a section or a key of the user's file in their opening words, where
    # no quote marks them: "USER.md has no ## <asked>, and <key> is set under ## <title>".
    heading, key = "Zebra4711 Projects", "Quokka4711"
    await given(sync, FileKind.USER, f"# USER.md\n\n## {heading}\n- {key}: x\n")
    await tools.update_user(f"{key}: y", section="Okapi4711", key=key)
    await tools.update_user(f"## Okapi4711 notes\n- {key}: z", section=heading)
    found = refusals(caplog)
    lines = [JsonFormatter().format(record) for record in found]
    assert [(r.levelno, json.loads(t)["error"]) for r, t in zip(found, lines, strict=True)] == [
        (logging.INFO, "refused"),
        (logging.INFO, "invalid_arguments"),
    ]
    assert all("4711" not in text and '"tool": "update_user"' in text for text in lines), lines


async def test_a_success_logs_no_refusal(
    tools: MemoryTools, caplog: pytest.LogCaptureFixture
) -> None:
    assert not (await tools.call("record_memory", {"content": "fine"})).failed
    assert refusals(caplog) == []


async def test_storage_down_is_a_warning(
    templates: TemplateSet, provider: LocalSandboxProvider, caplog: pytest.LogCaptureFixture
) -> None:
    sync = SyncService(unreachable_store(templates), provider)
    box = FaultySandbox(provider.for_user(USER), error=OSError(5, "I/O error"))
    tools = MemoryTools(ToolContext.bind(USER, sync, box), today=lambda: DAY)
    answer = await tools.record_memory(SECRET)
    assert answer.failed
    level, line = only_refusal(caplog)
    assert level == logging.WARNING
    assert (line["tool"], line["error"]) == ("record_memory", "OperationalError")


async def test_a_transport_that_logs_its_own_calls_turns_it_off(
    sync: SyncService, user_box: LocalDirectorySandbox, caplog: pytest.LogCaptureFixture
) -> None:
    # MCP logs every call as mcp.tool, failures with their code: not twice.
    tools = MemoryTools(ToolContext.bind(USER, sync, user_box, rounds=False), log_refusals=False)
    assert (await tools.call("record_memory", "{")).failed
    assert refusals(caplog) == []


async def test_a_guarded_write_to_agents_md(
    sync: SyncService, user_box: LocalDirectorySandbox, caplog: pytest.LogCaptureFixture
) -> None:
    async def write_file(path: str, content: str) -> str:
        raise AssertionError("the platform's tool must not run")

    guarded = GuardedFileTools(ToolContext.bind(USER, sync, user_box)).wrap(write_file)
    assert (await guarded("AGENTS.md", SECRET)).startswith("error: ")
    level, line = only_refusal(caplog)
    assert level == logging.INFO
    assert (line["tool"], line["error"]) == ("write_file", "protected_file")
