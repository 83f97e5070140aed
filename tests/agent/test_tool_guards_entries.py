"""The memory tools' guards for entries, against a real DB and sandbox: record_memory
corrects an entry in place, a new section is announced with a near miss named, and the same
entry twice is stored once."""

from __future__ import annotations

from datetime import date

import pytest

from memstrata.agent.tools import MemoryTools
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory
from tests.agent.tool_support import FULL_MEMORY, Day, given

pytestmark = pytest.mark.anyio


LATER = date(2026, 3, 9)


# -- M6: record_memory corrects an entry in place of piling a contradiction on it -------------


async def test_record_memory_replaces_the_entry_it_supersedes(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)

    answer = await tools.call(
        "record_memory",
        {
            "content": "Billing migration cancelled: staying on MySQL.",
            "replaces": "migrating BILLING (deadline: March)",
        },
    )

    assert answer == (
        "Recorded in MEMORY.md under ## Ongoing and removed the entry '2026-02-03: Migrating "
        f"billing (deadline: March).' (version {version + 1})."
    )
    # Removed, and the new entry is the newest of the old one's section (no section given).
    expected = FULL_MEMORY.replace("- 2026-02-03: Migrating billing (deadline: March).\n", "")
    expected = expected.replace(
        "  It runs out in June.\n",
        "  It runs out in June.\n- 2026-03-01: Billing migration cancelled: staying on MySQL.\n",
    )
    assert memory(store) == (expected, version + 1)


async def test_record_memory_replaces_by_the_whole_line_within_its_section(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)
    # The line as the prompt shows it, date and bullet included; a multi-line entry goes whole.
    # (With section, replaces names an entry of that section: test_replaces_in_section.)
    answer = await tools.record_memory(
        "Contract 49 signed.",
        section="Ongoing",
        replaces="- 2026-02-04: Reviewing vendor contract 49. It runs out in June.",
    )
    assert answer.startswith("Recorded in MEMORY.md under ## Ongoing and removed the entry ")
    content = memory(store)[0]
    assert "Reviewing vendor" not in content and "June" not in content
    assert "(deadline: March).\n- 2026-03-01: Contract 49 signed.\n\n## Lessons" in content
    assert memory(store)[1] == version + 1


@pytest.mark.parametrize(
    ("replaces", "error"),
    [
        (
            "billing",
            "error: replaces matches 2 entries of MEMORY.md: '2026-02-01: Chose PostgreSQL 15 "
            "for billing.'; '2026-02-03: Migrating billing (deadline: March).'. Quote more of "
            "the one to replace; nothing was written",
        ),
        (
            "Chose MySQL for billing",
            "error: replaces matches no entry of MEMORY.md; give the text of the entry to "
            "replace (its date may be left out); nothing was written. The closest: "
            "'2026-02-01: Chose PostgreSQL 15 for billing.'; '2026-02-03: Migrating billing "
            "(deadline: March).'.",
        ),
        (
            "zebra",
            "error: replaces matches no entry of MEMORY.md; give the text of the entry to "
            "replace (its date may be left out); nothing was written.",
        ),
    ],
)
async def test_record_memory_refuses_a_replaces_that_names_no_single_entry(
    replaces: str, error: str, tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)
    answer = await tools.record_memory("new", replaces=replaces)
    assert answer == error
    assert answer.failed
    assert memory(store) == (FULL_MEMORY, version)


async def test_record_memory_replaces_every_copy_of_a_duplicated_entry(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    copies = FULL_MEMORY.replace(
        "- 2026-02-05: Ask before deleting data.\n",
        "- 2026-02-05: Ask before deleting data.\n- 2026-02-06: ask before deleting  data.\n",
    )
    await given(sync, FileKind.MEMORY, copies)
    answer = await tools.record_memory("Ask before deleting anything.", replaces="deleting data")
    assert answer.startswith(
        "Recorded in MEMORY.md under ## Lessons and removed the entry '2026-02-05: Ask before "
        "deleting data.' (2 identical copies)"
    )
    assert memory(store)[0].endswith("## Lessons\n- 2026-03-01: Ask before deleting anything.\n")


# -- L1: a near miss is refused with the name meant, unless new_section ---------------------


async def test_a_near_miss_is_refused_and_new_section_announced(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)

    near_miss = await tools.record_memory("Keep weekly syncs on Tuesday.", section="Decision")
    spelled = await tools.record_memory("Never on Fridays.", section="LESSONS")
    meant = await tools.call(
        "record_memory",
        {"content": "Keep weekly syncs.", "section": "Decision", "new_section": True},
    )

    assert near_miss.failed
    assert near_miss == (
        "error: MEMORY.md has no ## Decision; did you mean ## Decisions? Pass "
        "section='Decisions' to use it, or new_section=true to create ## Decision beside it; "
        "nothing was written"
    )
    assert spelled == f"Recorded in MEMORY.md under ## Lessons (version {version + 1})."
    assert meant == (
        f"Recorded in MEMORY.md under ## Decision (version {version + 2}). New section: "
        "MEMORY.md had no ## Decision (its sections: Decisions, Ongoing, Lessons)."
    )
    user = await tools.update_user("Ann", section="User Profile", key="Nickname")
    assert user == (
        "error: USER.md has no ## User Profile; did you mean ## Profile? Pass "
        "section='Profile' to use it, or new_section=true to create ## User Profile beside "
        "it; nothing was written"
    )
    body = await tools.update_long_term_memory("- 2026-03-01: x", section="Ongoin")
    assert body.startswith("error: MEMORY.md has no ## Ongoin; did you mean ## Ongoing?")


# -- L2: the same entry twice is stored once -------------------------------------------------


async def test_the_same_entry_twice_is_no_change(
    tools: MemoryTools, sync: SyncService, store: MemoryStore, clock: Day
) -> None:
    await given(sync, FileKind.MEMORY, FULL_MEMORY)
    first = await tools.record_memory("Decided to keep  weekly syncs\non Tuesday.", "Decisions")
    content, version = memory(store)
    clock.today = LATER  # a retry on another day is still the same entry

    again = await tools.call(
        "record_memory",
        {"content": "decided to keep weekly syncs on tuesday.", "section": "decisions"},
    )

    assert first.startswith("Recorded")
    assert again == ("No change: MEMORY.md already has this entry under ## Decisions (2026-03-01).")
    assert not again.failed
    assert memory(store) == (content, version)
    # In another section it is another entry.
    assert (await tools.record_memory("Decided to keep weekly syncs on Tuesday.", "Ongoing")) == (
        f"Recorded in MEMORY.md under ## Ongoing (version {version + 1})."
    )


async def test_replacing_with_an_entry_the_section_has_only_removes_the_old_one(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)
    answer = await tools.record_memory(
        "Weekly syncs on Tuesday.", section="Decisions", replaces="PostgreSQL 15"
    )
    assert answer == (
        "Removed the entry '2026-02-01: Chose PostgreSQL 15 for billing.' from MEMORY.md; "
        f"## Decisions already has the new one (2026-02-02) (version {version + 1})."
    )
    assert "PostgreSQL" not in memory(store)[0]
    assert memory(store)[0].count("Weekly syncs on Tuesday.") == 1
