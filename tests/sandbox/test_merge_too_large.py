"""An agent's edit that is within the size limit alone, whose merge with a person's edit
is not: the merge is what the database refuses, not the agent's copy.

It was kept aside as ``rejected`` at its own size, under the limit, while the log's detail
gave the merge's size: a "too large" refusal of a file that is not. The DB copy now wins
over it as in a conflict, and the detail says the merge would be too large, with both
sizes. Real database (a store with a 4 KiB limit), real directories.
"""

from __future__ import annotations

import pytest

from memstrata.db.database import Database
from memstrata.memory.conflicts import list_copies
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.results import Outcome
from memstrata.sandbox.sync import SyncService
from tests.sandbox.support import USER, sync_events

pytestmark = pytest.mark.anyio

LIMIT = 4096
BASE = "# MEMORY\n\n## Decisions\n- keep it short\n\n## Notes\n- first note\n"
# 60 lines of 53 bytes each: either edit alone is within LIMIT, the two together are not.
HUMAN_LINES = "".join(f"- human {n:03} {'h' * 40}\n" for n in range(60))
AGENT_LINES = "".join(f"- agent {n:03} {'a' * 40}\n" for n in range(60))


@pytest.fixture
def small(db: Database, templates: TemplateSet) -> MemoryStore:
    return MemoryStore(db.sessions, templates, max_content_bytes=LIMIT)


async def test_a_merge_over_the_limit_says_so_and_keeps_the_copy_as_a_conflict(
    small: MemoryStore,
    provider: LocalSandboxProvider,
    user_box: LocalDirectorySandbox,
    logs: pytest.LogCaptureFixture,
) -> None:
    sync = SyncService(small, provider)
    first = await sync.frontend_edit(USER, FileKind.MEMORY, BASE)
    agent = BASE + AGENT_LINES  # appended under ## Notes
    await user_box.write_text("MEMORY.md", agent)
    human = BASE.replace("- keep it short\n", "- keep it short\n" + HUMAN_LINES)
    merged_size = len((human + AGENT_LINES).encode())
    assert len(agent.encode()) <= LIMIT < merged_size
    logs.clear()

    await sync.frontend_edit(USER, FileKind.MEMORY, human, first.version)

    events = sync_events(logs)
    [mirrored] = [e for e in events if e["scenario"] == "frontend" and e["file"] == "MEMORY.md"][1:]
    assert mirrored["result"] == Outcome.CONFLICT.value
    assert mirrored["detail"].startswith(
        f"merged with the DB copy it would be {merged_size:,} bytes, over the limit of "
        f"{LIMIT:,} bytes (the agent's copy alone is {len(agent.encode()):,} bytes, "
        "within it): the DB copy won; the agent's copy was saved to "
        ".memstrata/conflicts/MEMORY.md."
    )
    page = await list_copies(provider, USER)
    [copy] = page.copies
    assert (copy.copy.reason, copy.size_bytes) == ("conflict", len(agent.encode()))
    assert await user_box.read_text("MEMORY.md") == human  # the person's edit, pushed
    stored = small.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and stored.content == human


async def test_a_copy_over_the_limit_itself_is_still_rejected(
    small: MemoryStore,
    provider: LocalSandboxProvider,
    user_box: LocalDirectorySandbox,
) -> None:
    sync = SyncService(small, provider)
    await sync.frontend_edit(USER, FileKind.MEMORY, BASE)
    too_big = BASE + AGENT_LINES * 3

    await user_box.write_text("MEMORY.md", too_big)
    result = await sync.after_controlled_write(USER, "MEMORY.md")

    assert result.outcome is Outcome.REJECTED
    assert (result.detail or "").startswith(
        f"content is {len(too_big.encode())} bytes, over the limit of {LIMIT} bytes"
    )
    [copy] = (await list_copies(provider, USER)).copies
    assert (copy.copy.reason, copy.size_bytes) == ("rejected", len(too_big.encode()))
