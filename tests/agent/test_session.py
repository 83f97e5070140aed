"""Opening an agent session: sync first, then the prompt from the DB within the budget."""

from __future__ import annotations

import gc
import math

import pytest
from sqlalchemy.exc import OperationalError

from memstrata.agent.prompt import build_system_prompt
from memstrata.agent.session import build_memory_prompt, open_agent_session
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.retrieval.tokenize import count_tokens
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.sync import Outcome, SyncService
from tests.sandbox.support import USER, FaultySandbox, unreachable_store, warning_events

pytestmark = pytest.mark.anyio


async def test_prompt_is_agents_template_plus_db_files_within_15_percent(
    sync: SyncService, store: MemoryStore, templates: TemplateSet
) -> None:
    await sync.provision_user(USER)
    await sync.frontend_edit(USER, "user", "- Name: Ada\n")

    prompt = await build_memory_prompt(store, USER, token_limit=20_000)

    expected = build_system_prompt(
        agents_md=templates.agents_md(),
        soul=templates.load(FileKind.SOUL),
        user="- Name: Ada\n",
        memory=templates.load(FileKind.MEMORY),
        token_limit=20_000,
        count=count_tokens,
        ratio=0.15,
    )
    assert prompt == expected
    assert prompt.budget == 3000
    assert prompt.tokens == count_tokens(prompt.text) <= 3000
    assert (prompt.truncated, prompt.dropped) == ((), ())
    order = [
        prompt.text.index(f'<file name="{n}">')
        for n in ("AGENTS.md", "SOUL.md", "USER.md", "MEMORY.md")
    ]
    assert order == sorted(order)


async def test_a_small_budget_cuts_the_lowest_priority_file(
    sync: SyncService, store: MemoryStore, templates: TemplateSet
) -> None:
    await sync.provision_user(USER)
    # Room for AGENTS and SOUL in full (with their tags) and 120 more tokens: USER.md's
    # start and the line naming MEMORY.md, left out (the spec's order: no floors by default).
    agents_and_soul = build_system_prompt(
        agents_md=templates.agents_md(),
        soul=templates.load(FileKind.SOUL),
        user="",
        memory="",
        token_limit=1_000_000,
        count=count_tokens,
    ).tokens
    limit = math.ceil((agents_and_soul + 120) / 0.15)

    prompt = await build_memory_prompt(store, USER, token_limit=limit, ratio=0.15)

    assert prompt.tokens <= prompt.budget == math.floor(limit * 0.15)
    assert prompt.truncated == ("USER.md",)
    assert prompt.dropped == ("MEMORY.md",)
    assert "…[truncated: USER.md," in prompt.text
    assert "\n\n[left out for lack of room: MEMORY.md (" in prompt.text


async def test_db_unreachable_prompt_falls_back_to_the_sandbox(
    templates: TemplateSet,
    provider: LocalSandboxProvider,
    user_box: LocalDirectorySandbox,
    logs: pytest.LogCaptureFixture,
) -> None:
    await user_box.write_text("USER.md", "- Name: Sandboxed\n")
    offline = unreachable_store(templates)

    prompt = await build_memory_prompt(offline, USER, token_limit=50_000, sandbox=user_box)

    assert '<file name="USER.md">\n- Name: Sandboxed\n</file>' in prompt.text
    assert '<file name="SOUL.md">' not in prompt.text  # empty in the sandbox: left out
    unreadable = FaultySandbox(
        user_box, error=OSError(5, "I/O error"), fail=lambda path, op: path == "USER.md"
    )
    prompt = await build_memory_prompt(offline, USER, token_limit=50_000, sandbox=unreadable)
    assert '<file name="USER.md">' not in prompt.text
    assert [w["event"] for w in warning_events(logs)] == ["prompt.from_sandbox"] * 2
    with pytest.raises(OperationalError):
        await build_memory_prompt(offline, USER, token_limit=50_000)


async def test_open_agent_session_syncs_sandbox_first_then_builds_everything(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    await sync.start_session(USER, "s1")
    sync.end_session(USER, "s1")  # the last session of this id, over
    box = provider.for_user(USER, "s1")
    await box.write_text("MEMORY.md", "- left by the last session\n")

    session = await open_agent_session(sync, USER, session_id="s1", token_limit=50_000)

    assert {r.filename: r.outcome for r in session.start_results}["MEMORY.md"] is Outcome.WRITTEN
    assert "- left by the last session" in session.prompt.text
    assert session.tracker.base_version("MEMORY.md") == 2
    assert [s["function"]["name"] for s in session.tools.schemas()] == [
        "record_memory",
        "update_long_term_memory",
        "update_user",
    ]

    session.on_tool_call("record_memory", {"content": "x"})
    assert await session.tools.record_memory("x", section="Notes") == (
        "Recorded in MEMORY.md under ## Notes (version 3)."
    )
    assert session.tracker.dirty == frozenset({"MEMORY.md"})  # the spec's tool-name flag
    assert session.tracker.needs_read_back == frozenset()  # ... but the tool wrote through
    assert await session.end_round() == []  # so the round end reads nothing back
    assert session.tracker.dirty == frozenset()
    assert session.tracker.base_version("MEMORY.md") == 3

    # A host that reports the call only after it ran: the same, nothing read back.
    assert await session.tools.record_memory("y", section="Notes") == (
        "Recorded in MEMORY.md under ## Notes (version 4)."
    )
    session.on_tool_call("record_memory", {"content": "y"})
    assert session.tracker.needs_read_back == frozenset()
    assert await session.end_round() == []

    session.close()
    await sync.frontend_edit(USER, "memory", "after close\n")
    assert await box.read_text("MEMORY.md") != "after close\n"
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and stored.content == "after close\n"


async def test_a_guarded_write_reported_as_such_is_not_read_back(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    session = await open_agent_session(sync, USER, session_id="s1", token_limit=50_000)
    box = provider.for_user(USER, "s1")

    async def write_file(path: str, content: str) -> str:  # the platform's own tool
        await box.write_text(path, content)
        return "written"

    guarded = session.file_tools.wrap(write_file)
    assert await guarded(path="MEMORY.md", content="- guarded\n") == "written"
    session.on_tool_call("write_file", {"path": "MEMORY.md"}, guarded=True)  # after it ran
    assert session.tracker.needs_read_back == frozenset()
    assert await session.end_round() == []  # stored by the guard already: nothing read back

    await box.write_text("MEMORY.md", "- unguarded\n")  # the platform's tool, not wrapped
    session.on_tool_call("write_file", {"path": "MEMORY.md"})
    results = await session.end_round()
    assert {r.filename: r.outcome for r in results}["MEMORY.md"] is Outcome.WRITTEN
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and stored.content == "- unguarded\n"
    session.close()


async def test_on_tool_call_never_raises_on_arguments_that_are_no_object(
    sync: SyncService,
) -> None:
    session = await open_agent_session(sync, USER, token_limit=50_000)
    session.on_tool_call("write_file", ["USER.md", "hello"])  # was ValueError
    session.on_tool_call("edit_file", 5)  # was TypeError
    session.on_tool_call("write_file", [["path", "USER.md"]])  # was taken as {"path": ...}
    session.on_tool_call([], {"path": "USER.md"})  # type: ignore[arg-type]  # unhashable name
    assert session.tracker.dirty == frozenset()
    session.on_tool_call("write_file", {"path": "USER.md"})
    assert session.tracker.dirty == frozenset({"USER.md"})


async def test_a_forgotten_session_stops_receiving_pushes_and_a_reopened_id_stays_open(
    sync: SyncService, provider: LocalSandboxProvider
) -> None:
    """A host that drops a session without close() must not leave every later frontend
    edit mirrored to its sandbox; one that opens the same session id twice keeps it open
    until both have ended."""
    first = await open_agent_session(sync, USER, session_id="s1", token_limit=50_000)
    second = await open_agent_session(sync, USER, session_id="s1", token_limit=50_000)
    assert sync.open_sessions(USER) == ["s1"]
    first.close()
    first.close()  # idempotent: it must not end the second one's count too
    assert sync.open_sessions(USER) == ["s1"]
    del second
    gc.collect()
    assert sync.open_sessions(USER) == []


async def test_a_session_that_fails_to_open_is_not_left_open(
    sync: SyncService, provider: LocalSandboxProvider
) -> None:
    def broken(text: str) -> int:
        raise ZeroDivisionError("the host's tokenizer")

    with pytest.raises(ZeroDivisionError):
        await open_agent_session(sync, USER, session_id="s1", token_limit=50_000, count=broken)
    assert sync.open_sessions(USER) == []
