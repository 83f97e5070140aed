"""Two appends to MEMORY.md — the agent's in its sandbox, a person's through the frontend —
keep both entries: no conflict copy, one merged version everywhere."""

from __future__ import annotations

import pytest

from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.local import LocalDirectorySandbox
from memstrata.sandbox.sync import Outcome, SyncService
from tests.sandbox.support import USER

pytestmark = pytest.mark.anyio

BASE = "# Memory\n\n## Decisions\n- a\n"
AGENT = BASE + "- agent: moved the standup to 10:00\n"
HUMAN = BASE + "- human: allergic to peanuts\n"
BOTH = BASE + "- human: allergic to peanuts\n- agent: moved the standup to 10:00\n"


async def test_an_agent_append_and_a_frontend_append_are_both_kept(
    sync: SyncService, store: MemoryStore, user_box: LocalDirectorySandbox
) -> None:
    await sync.start_session(USER, None)
    await sync.frontend_edit(USER, "memory", BASE)  # version 2 everywhere
    tracker = await sync.begin_round(USER, None)
    await user_box.write_text("MEMORY.md", AGENT)  # `echo >> MEMORY.md`, not read back yet
    tracker.on_tool_call("write_file", {"path": "MEMORY.md"})

    human = await sync.frontend_edit(USER, "memory", HUMAN)
    results = await sync.end_round(tracker)

    assert human.version == 3
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and (stored.content, stored.version) == (BOTH, 4)
    assert await user_box.read_text("MEMORY.md") == BOTH
    assert await user_box.list(".memstrata/conflicts/") == []
    # The mirror merged them; the round end reports that, as when another process edits.
    assert {r.filename: r.outcome for r in results}["MEMORY.md"] is Outcome.MERGED
