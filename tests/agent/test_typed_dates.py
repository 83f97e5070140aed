"""A date a model types before an entry, as ``record_memory`` dates the entry: a nearby past
date (yesterday's event recorded today) or tomorrow's (a user east of UTC) is the entry's
date; one in the future or more than 31 days ago — a model that takes its training
cut-off for today writes 2024-05-01 — is kept in the text, the entry is dated today, and
the answer says so in one sentence. Through the library's tools on a real DB and sandbox
(today: 2026-03-01)."""

from __future__ import annotations

import pytest

from memstrata.agent.tools import MemoryTools
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory
from tests.agent.tool_support import FULL_MEMORY, given

pytestmark = pytest.mark.anyio

LESSONS = "## Lessons\n- 2026-02-05: Ask before deleting data.\n"


@pytest.mark.parametrize(
    ("typed", "stored"),
    [
        ("2026-02-28: Met Ana", "- 2026-02-28: Met Ana"),  # yesterday
        ("- 2026-01-29: Met Ana", "- 2026-01-29: Met Ana"),  # 31 days ago
        ("2026-03-01: Met Ana", "- 2026-03-01: Met Ana"),  # today
        ("2026-03-02: Met Ana", "- 2026-03-02: Met Ana"),  # today east of UTC
    ],
)
async def test_a_nearby_date_is_the_entrys(
    tools: MemoryTools, sync: SyncService, store: MemoryStore, typed: str, stored: str
) -> None:
    await given(sync, FileKind.MEMORY, FULL_MEMORY)
    answer = await tools.record_memory(typed, "Lessons")
    assert answer == f"Recorded in MEMORY.md under ## Lessons (version {memory(store)[1]})."
    assert memory(store)[0].endswith(f"{LESSONS}{stored}\n")


@pytest.mark.parametrize(
    ("typed", "why"),
    [
        ("2024-05-01", "more than 31 days ago"),
        ("- 2026-01-28", "more than 31 days ago"),
        ("2026-03-03", "in the future"),
        ("2027-04-15", "in the future"),
    ],
)
async def test_a_far_date_stays_in_the_text_of_an_entry_dated_today(
    tools: MemoryTools, sync: SyncService, store: MemoryStore, typed: str, why: str
) -> None:
    await given(sync, FileKind.MEMORY, FULL_MEMORY)
    answer = await tools.record_memory(f"{typed}: Started the job", "Lessons")
    day = typed.removeprefix("- ")
    assert not answer.failed
    assert answer == (
        f"Recorded in MEMORY.md under ## Lessons (version {memory(store)[1]}). Note: today is "
        f"2026-03-01, so the entry is dated today, and {day} ({why}) stays in its text."
    )
    assert memory(store)[0].endswith(f"{LESSONS}- 2026-03-01: {day}: Started the job\n")


async def test_a_list_dates_each_item_and_names_every_date_kept(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    await given(sync, FileKind.MEMORY, FULL_MEMORY)
    answer = await tools.record_memory(
        "- 2024-05-01: Likes A\n- 2026-02-27: Likes B\n- 2027-01-01: Likes C\n- 2024-05-01: D",
        "Lessons",
    )
    assert answer.endswith(
        "Note: today is 2026-03-01, so 3 of the entries are dated today, and 2024-05-01 (more "
        "than 31 days ago) and 2027-01-01 (in the future) stay in their text."
    )
    assert memory(store)[0].endswith(
        f"{LESSONS}- 2026-03-01: 2024-05-01: Likes A\n- 2026-02-27: Likes B\n"
        "- 2026-03-01: 2027-01-01: Likes C\n- 2026-03-01: 2024-05-01: D\n"
    )


async def test_a_retry_of_a_far_dated_entry_is_no_change(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    await given(sync, FileKind.MEMORY, FULL_MEMORY)
    await tools.record_memory("2024-05-01: Started the job", "Lessons")
    after = memory(store)
    again = await tools.record_memory("2024-05-01: Started the job", "Lessons")
    assert again == "No change: MEMORY.md already has this entry under ## Lessons (2026-03-01)."
    assert memory(store) == after


@pytest.mark.parametrize(
    "quoted",
    [
        "- 2026-03-01: 2024-05-01: Started the job",  # the line as memory_read shows it
        "2026-03-01: 2024-05-01: Started the job",
        "2024-05-01: Started the job",
        "Started the job",
    ],
)
async def test_a_far_dated_entry_is_replaced_by_its_text_as_the_file_shows_it(
    tools: MemoryTools, sync: SyncService, store: MemoryStore, quoted: str
) -> None:
    # The date kept in the text follows the entry's own date: replaces quoting both names
    # the entry, as it does one with a single date.
    await given(sync, FileKind.MEMORY, FULL_MEMORY)
    await tools.record_memory("2024-05-01: Started the job", "Lessons")
    assert memory(store)[0].endswith("- 2026-03-01: 2024-05-01: Started the job\n")
    answer = await tools.record_memory("Started the job in May 2024", replaces=quoted)
    assert answer == (
        "Recorded in MEMORY.md under ## Lessons and removed the entry '2026-03-01: "
        f"2024-05-01: Started the job' (version {memory(store)[1]})."
    )
    assert memory(store)[0].endswith(f"{LESSONS}- 2026-03-01: Started the job in May 2024\n")
