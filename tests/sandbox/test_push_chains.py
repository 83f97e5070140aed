"""Several pushes with no write-back between them: a copy the agent read from any of them.

Three DB versions reach a sandbox one after another (v1, then v2 adding two facts, then v3
deleting one of them, acknowledged) while the agent writes nothing back. An agent that
read the middle copy (v2) and writes it back whole — unchanged, or with a line of its own
— must not undo v3's deletion: the base record names every copy memstrata wrote to the
file since the last write-back, and the rule merges the write from the copy it was read
from. Real database and directories through ``SyncService``; the pure record and rule
tests are in ``test_push_chain_rule.py``.
"""

from __future__ import annotations

import pytest

from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.local import LocalDirectorySandbox
from memstrata.sandbox.results import Outcome
from memstrata.sandbox.sync import SyncService
from tests.sandbox.push_copies import MEMORY_MD, V1, V2, V3, stored
from tests.sandbox.support import USER

pytestmark = pytest.mark.anyio

AGENT = "- Z: agent note\n"


def with_agent_line(text: str) -> str:
    """The agent's line at the top of the facts, away from the line v3 deleted."""
    return text.replace("## Facts\n", "## Facts\n" + AGENT, 1)


async def three_versions_pushed(store: MemoryStore, sync: SyncService) -> None:
    """v1 provisioned and in the sandbox, v2 and v3 saved by the user and pushed."""
    store.upsert_memory_file(USER, FileKind.MEMORY, V1, 0)
    await sync.start_session(USER)
    await sync.frontend_edit(USER, "memory", V2, 1)
    acknowledged = await sync.frontend_edit(USER, "memory", V3, 2)
    assert (acknowledged.content, acknowledged.version) == (V3, 3)


@pytest.mark.parametrize("read_back", ["controlled write", "session start"])
async def test_the_middle_copy_written_back_unchanged_does_not_undo_the_last_push(
    read_back: str, store: MemoryStore, sync: SyncService, user_box: LocalDirectorySandbox
) -> None:
    await three_versions_pushed(store, sync)
    assert await user_box.read_text(MEMORY_MD) == V3
    await user_box.write_text(MEMORY_MD, V2)  # the agent writes back what it read: v2

    if read_back == "controlled write":
        result = await sync.after_controlled_write(USER, MEMORY_MD)
    else:
        results = await sync.start_session(USER)
        result = next(r for r in results if r.filename == MEMORY_MD)

    assert result.outcome in (Outcome.PUSHED, Outcome.RESTORED)
    assert stored(store) == (V3, 3)  # the deletion stands, no new version
    assert await user_box.read_text(MEMORY_MD) == V3


@pytest.mark.parametrize("read_back", ["controlled write", "session start"])
async def test_the_middle_copy_plus_a_line_keeps_the_line_and_the_last_push(
    read_back: str, store: MemoryStore, sync: SyncService, user_box: LocalDirectorySandbox
) -> None:
    await three_versions_pushed(store, sync)
    await user_box.write_text(MEMORY_MD, with_agent_line(V2))  # what it read, plus a line

    if read_back == "controlled write":
        result = await sync.after_controlled_write(USER, MEMORY_MD)
    else:
        results = await sync.start_session(USER)
        result = next(r for r in results if r.filename == MEMORY_MD)

    assert (result.outcome, result.version) == (Outcome.MERGED, 4)
    assert stored(store) == (with_agent_line(V3), 4)
    assert await user_box.read_text(MEMORY_MD) == with_agent_line(V3)


async def test_every_copy_since_the_last_write_back_is_remembered_and_then_forgotten(
    store: MemoryStore, sync: SyncService, user_box: LocalDirectorySandbox
) -> None:
    await three_versions_pushed(store, sync)
    # The agent writes back an edit of the current copy: a new base, the copies forgotten.
    await user_box.write_text(MEMORY_MD, V3 + AGENT)
    written = await sync.after_controlled_write(USER, MEMORY_MD)
    assert (written.outcome, written.version) == (Outcome.WRITTEN, 4)

    # From now on v2's text is an edit like any other: it brings Y back, as asked.
    await user_box.write_text(MEMORY_MD, V2)
    again = await sync.after_controlled_write(USER, MEMORY_MD)
    assert (again.outcome, again.version) == (Outcome.WRITTEN, 5)
    assert stored(store) == (V2, 5)
