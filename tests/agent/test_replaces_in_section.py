"""``record_memory``'s ``replaces`` with ``section`` names an entry of that section only,
against a real DB and sandbox: a removal or a correction never reaches into another
section, and one that names only an entry elsewhere is refused with where it is."""

from __future__ import annotations

import pytest

from memstrata.agent.tools import MemoryTools
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory
from tests.agent.tool_support import FULL_MEMORY, given

pytestmark = pytest.mark.anyio

MIGRATING = "'2026-02-03: Migrating billing (deadline: March).'"
# The same entry in two sections: one removal names the copy of its section only.
TWICE = FULL_MEMORY.replace("## Lessons\n", "## Lessons\n- 2026-02-07: Weekly syncs on Tuesday.\n")


async def test_a_removal_with_section_removes_that_sections_entry_only(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, TWICE)

    answer = await tools.call(
        "record_memory",
        {"content": "", "replaces": "Weekly syncs on Tuesday.", "section": "Lessons"},
    )

    assert answer == (
        "Removed the entry '2026-02-07: Weekly syncs on Tuesday.' from MEMORY.md under "
        f"## Lessons (version {version + 1})."
    )
    assert memory(store) == (FULL_MEMORY, version + 1)


@pytest.mark.parametrize(
    ("content", "section", "how"),
    [
        ("", "Lessons", "Pass section='Ongoing' to remove it there"),
        # A section the file lacks holds no entry either (and a misspelt name is no licence
        # to reach into every section).
        ("", "Lesons", "Pass section='Ongoing' to remove it there"),
        (
            "Billing migration cancelled.",
            "Decisions",
            "Pass section='Ongoing' to replace it there, or remove it there (empty content) "
            "and record the new entry under ## Decisions",
        ),
    ],
)
async def test_replaces_found_only_in_another_section_is_refused_with_where_it_is(
    content: str, section: str, how: str, tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)

    answer = await tools.record_memory(content, section=section, replaces="Migrating billing")

    assert answer == (
        f"error: replaces matches no entry under ## {section} of MEMORY.md, but 1 under "
        f"## Ongoing: {MIGRATING}. {how}; nothing was written"
    )
    assert answer.failed
    assert memory(store) == (FULL_MEMORY, version)


async def test_matches_in_several_other_sections_are_all_named(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)

    answer = await tools.record_memory("", section="Lessons", replaces="billing")

    assert answer == (
        "error: replaces matches no entry under ## Lessons of MEMORY.md, but 2 under "
        "## Decisions, ## Ongoing: '2026-02-01: Chose PostgreSQL 15 for billing.'; "
        f"{MIGRATING}. Pass the section of the one to remove; nothing was written"
    )
    assert memory(store) == (FULL_MEMORY, version)


async def test_without_section_replaces_still_names_an_entry_of_any_section(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)

    answer = await tools.record_memory("", replaces="Migrating billing")

    assert answer == (
        f"Removed the entry {MIGRATING} from MEMORY.md under ## Ongoing (version {version + 1})."
    )
