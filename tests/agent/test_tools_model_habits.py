"""The entry tools as a language model calls them, against a real DB and sandbox: a bulleted
``record_memory`` is one entry per item, a misspelled section or a key set elsewhere is
refused with the name to use, the markup a model types that the tools write themselves is
not stored twice, and a retried ``replaces`` whose first call landed is no change."""

from __future__ import annotations

import pytest

from memstrata.agent.tools import MemoryTools
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory, user_md
from tests.agent.tool_support import FULL_MEMORY, given

pytestmark = pytest.mark.anyio

FULL_USER = """# USER.md

## Profile
- Name: Robert
- Time zone: Europe/Berlin

## Work
- Role: engineer
"""


# -- a bulleted record_memory: one entry per item, and replaces removes one ------------------


async def test_a_bulleted_record_is_one_entry_per_item_and_replaces_removes_one(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)

    listed = await tools.record_memory("- Likes A\n- Likes B\n  since 2020\n- Likes C", "Lessons")
    corrected = await tools.record_memory("Likes B2", replaces="Likes B")

    assert listed == f"Recorded 3 entries in MEMORY.md under ## Lessons (version {version + 1})."
    assert corrected == (
        "Recorded in MEMORY.md under ## Lessons and removed the entry '2026-03-01: Likes B "
        f"since 2020' (2 lines) (version {version + 2})."
    )
    assert memory(store)[0].endswith(
        "## Lessons\n- 2026-02-05: Ask before deleting data.\n- 2026-03-01: Likes A\n"
        "- 2026-03-01: Likes C\n- 2026-03-01: Likes B2\n"
    )


async def test_a_listed_item_the_section_has_is_left_out_and_named(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)

    some = await tools.record_memory("* Likes A\n* Ask before deleting data.\n* Likes A", "Lessons")
    again = await tools.record_memory("1. likes a\n2. Ask before deleting data.", "lessons")

    assert some == (
        "Recorded 1 entry in MEMORY.md under ## Lessons, not the 1 it already had "
        f"('2026-02-05: Ask before deleting data.') (version {version + 1})."
    )
    assert again == "No change: MEMORY.md already has these 2 entries under ## Lessons."
    assert memory(store)[0].endswith(
        "## Lessons\n- 2026-02-05: Ask before deleting data.\n- 2026-03-01: Likes A\n"
    )


async def test_replaces_naming_a_line_inside_a_longer_entry_removes_nothing(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    # As the bulleted record stored it before: one entry, its items nested under it.
    old = FULL_MEMORY + "- 2026-02-06: - Likes A\n  - Likes B\n  - Likes C\n"
    version = await given(sync, FileKind.MEMORY, old)

    answer = await tools.record_memory("Likes B2", replaces="Likes B")

    assert answer == (
        "error: replaces names a line inside a longer entry of MEMORY.md, '2026-02-06: - Likes "
        "A - Likes B - Likes C' (3 lines), and removing it would remove its other lines too; "
        "nothing was written. To replace that whole entry, quote its first line ('- Likes "
        "A') as replaces and send every line to keep as content (a list is stored as one "
        "entry per item)"
    )
    assert memory(store) == (old, version)
    fixed = await tools.record_memory("- Likes A\n- Likes B2\n- Likes C", replaces="- Likes A")
    assert fixed.startswith("Recorded 3 entries in MEMORY.md under ## Lessons and removed")
    assert memory(store)[0].endswith(
        "- 2026-02-05: Ask before deleting data.\n- 2026-03-01: Likes A\n"
        "- 2026-03-01: Likes B2\n- 2026-03-01: Likes C\n"
    )


# -- a misspelled section, a key set elsewhere: refused with the name to use -----------------


async def test_a_misspelled_section_is_refused_with_the_name_to_use(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    await given(sync, FileKind.USER, FULL_USER)
    memory_version = await given(sync, FileKind.MEMORY, FULL_MEMORY)

    user = await tools.call("update_user", {"section": "Profil", "key": "Name", "content": "Bob"})
    entry = await tools.record_memory("Keep weekly syncs on Tuesday.", section="Decision")

    assert user.failed and entry.failed
    assert user == (
        "error: USER.md has no ## Profil, and Name is set under ## Profile ('Name: Robert'); "
        "to change it, pass section='Profile'. To add ## Profil with a Name of its own, pass "
        "new_section=true; nothing was written"
    )
    assert entry == (
        "error: MEMORY.md has no ## Decision; did you mean ## Decisions? Pass "
        "section='Decisions' to use it, or new_section=true to create ## Decision beside it; "
        "nothing was written"
    )
    assert user_md(store)[0] == FULL_USER
    assert memory(store) == (FULL_MEMORY, memory_version)


async def test_a_key_set_in_another_section_is_refused_and_new_section_creates(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.USER, FULL_USER)

    refused = await tools.update_user("Ann", section="Personal", key="**name**")
    created = await tools.call(
        "update_user",
        {"section": "Personal", "key": "Name", "content": "Ann", "new_section": True},
    )

    assert refused == (
        "error: USER.md has no ## Personal, and Name is set under ## Profile ('Name: "
        "Robert'); to change it, pass section='Profile'. To add ## Personal with a Name of "
        "its own, pass new_section=true; nothing was written"
    )
    assert created == (
        f"Set Name under ## Personal in USER.md (version {version + 1}). New section: USER.md "
        "had no ## Personal (its sections: Profile, Work)."
    )
    assert user_md(store)[0] == FULL_USER + "\n## Personal\n- Name: Ann\n"


async def test_a_body_for_a_new_section_with_keys_set_elsewhere_is_refused(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.USER, FULL_USER)
    body = "- Name: Ann\n- Role: manager\n- Likes: tea"

    refused = await tools.update_user(body, section="About")
    meant = await tools.update_user(body, section="About", new_section=True)

    assert refused == (
        "error: USER.md has no ## About, and other sections set its keys: Name under ## "
        "Profile, Role under ## Work; set them there (update_user with key), or pass "
        "new_section=true to add ## About with keys of its own; nothing was written"
    )
    assert meant == (
        f"Replaced ## About in USER.md (version {version + 1}). New section: USER.md had no "
        "## About (its sections: Profile, Work)."
    )


# -- the markup a model types that the tools write themselves --------------------------------


async def test_a_models_markup_is_not_stored_twice(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    await given(sync, FileKind.MEMORY, FULL_MEMORY)
    await given(sync, FileKind.USER, FULL_USER)

    answers = [
        await tools.record_memory("- Prefers dark mode", "Lessons"),
        await tools.record_memory("2026-03-01: Uses vim", "Lessons"),
        await tools.record_memory("- 2026-02-28: Uses emacs too", "Lessons"),
        await tools.record_memory("Prefers dark mode", "Lessons"),
        await tools.update_user("Ivan", section="Profile", key="**Name**"),
        await tools.update_user("- Ivan", section="Profile", key="Name"),
    ]

    assert [a.failed for a in answers] == [False] * 6
    assert answers[3] == (
        "No change: MEMORY.md already has this entry under ## Lessons (2026-03-01)."
    )
    assert answers[5] == "No change: USER.md already says that."
    assert memory(store)[0].endswith(
        "## Lessons\n- 2026-02-05: Ask before deleting data.\n- 2026-03-01: Prefers dark mode\n"
        "- 2026-03-01: Uses vim\n- 2026-02-28: Uses emacs too\n"
    )
    assert user_md(store)[0] == FULL_USER.replace("- Name: Robert", "- Name: Ivan")


# -- a retried replaces whose first call landed ----------------------------------------------


@pytest.mark.parametrize("section", [None, "Ongoing"])
async def test_a_retried_replace_is_no_change(
    section: str | None, tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    await given(sync, FileKind.MEMORY, FULL_MEMORY)
    arguments = {
        "content": "Migrating billing (deadline: April).",
        "replaces": "Migrating billing (deadline: March)",
        **({"section": section} if section else {}),
    }
    first = await tools.call("record_memory", arguments)
    after = memory(store)

    again = await tools.call("record_memory", arguments)

    assert first.startswith("Recorded in MEMORY.md under ## Ongoing and removed the entry")
    assert not again.failed
    assert again == (
        "No change: MEMORY.md already holds this under ## Ongoing (2026-03-01), and no entry "
        "matches replaces any more."
    )
    assert memory(store) == after


async def test_a_retried_replace_whose_text_contains_replaces_is_no_change(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    # "Likes B" is part of the new entry "Likes B2": the retry must not take it for the
    # entry to replace (it would remove the entry the first call added, and add it again).
    await given(sync, FileKind.MEMORY, FULL_MEMORY + "- 2026-02-06: Likes B\n")
    await tools.record_memory("Likes B2", replaces="Likes B")
    after = memory(store)

    again = await tools.record_memory("Likes B2", replaces="Likes B")

    assert again == (
        "No change: MEMORY.md already holds this under ## Lessons (2026-03-01), and no entry "
        "matches replaces any more."
    )
    assert memory(store) == after
