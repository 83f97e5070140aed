"""``update_long_term_memory`` with ``section`` and ``update_user`` without ``key`` never
drop a section's entries without a word, against a real DB and sandbox: a body that would
remove an entry (a fact by its key, a plain bullet by its text: one rule, ``agent.removals``)
is refused unless ``replace_section``, and a replacement's answer lists what it removed in
``whole_file``'s words."""

from __future__ import annotations

import pytest

from memstrata.agent.tools import MemoryTools
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory, user_md
from tests.agent.tool_support import FULL_MEMORY, given

pytestmark = pytest.mark.anyio

MIGRATING = "'2026-02-03: Migrating billing (deadline: March).'"
VENDOR = "'2026-02-04: Reviewing vendor contract 49.'"


async def test_a_summary_that_drops_entries_is_refused_and_names_them(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)

    answer = await tools.update_long_term_memory(
        "- 2026-03-01: summary: billing work", section="Ongoing"
    )

    assert answer == (
        "error: content replaces the whole body of ## Ongoing, and this one would remove "
        f"2 of its 2 entries ({MIGRATING}, {VENDOR}). Keep those lines in content, correct "
        "one entry with record_memory's replaces, or pass replace_section=true to remove "
        "them; nothing was written"
    )
    assert answer.failed
    assert memory(store) == (FULL_MEMORY, version)


async def test_empty_content_does_not_clear_a_section_of_entries(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)

    answer = await tools.call("update_long_term_memory", {"section": "Lessons", "content": ""})

    assert answer.failed and "would remove 1 of its 1 entry (" in answer
    assert "replace_section=true" in answer
    assert memory(store) == (FULL_MEMORY, version)


async def test_eighty_entries_are_counted_and_the_list_is_cut(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    notes = "\n".join(f"- 2026-02-01: note {n}" for n in range(80))
    version = await given(sync, FileKind.MEMORY, f"# MEMORY.md\n\n## Concurrency\n{notes}\n")

    answer = await tools.call(
        "update_long_term_memory",
        {"section": "Concurrency", "content": "- 2026-12-06: summary: two agents wrote 80 notes"},
    )

    assert answer.failed and "would remove 80 of its 80 entries ('2026-02-01: note 0', " in answer
    assert "'2026-02-01: note 11', …)" in answer and "note 12'" not in answer
    assert memory(store)[1] == version


async def test_replace_section_true_replaces_and_the_answer_lists_what_went(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)

    answer = await tools.call(
        "update_long_term_memory",
        {"section": "Ongoing", "content": "- 2026-03-01: summary", "replace_section": True},
    )

    assert answer == (
        f"Replaced ## Ongoing in MEMORY.md (version {version + 1}). Removed 2 entries "
        f"({MIGRATING}, {VENDOR})."
    )
    assert "## Ongoing\n- 2026-03-01: summary\n\n## Lessons" in memory(store)[0]


async def test_a_body_that_keeps_every_entry_needs_no_flag(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)
    # Re-dated and re-ordered, with one entry added: nothing is removed.
    body = (
        "- 2026-03-01: Weekly syncs on Tuesday.\n- 2026-02-01: Chose PostgreSQL 15 for billing."
        "\n- 2026-03-01: Hired Bo."
    )

    answer = await tools.update_long_term_memory(body, section="Decisions")

    assert answer == f"Replaced ## Decisions in MEMORY.md (version {version + 1})."


async def test_replace_section_without_section_is_an_error(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)

    answer = await tools.call("update_long_term_memory", {"content": "x", "replace_section": True})

    assert answer == (
        "error: replace_section goes with section or whole_file (it removes what the replaced "
        "text held); to replace one section's body, pass section; to replace the whole file, "
        "whole_file=true"
    )
    assert memory(store) == (FULL_MEMORY, version)


async def test_update_user_replace_section_lists_the_facts_it_removed(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    user = "# USER.md\n\n## Profile\n- Name: Ann\n- Time zone: Europe/Berlin\n"
    version = await given(sync, FileKind.USER, user)

    answer = await tools.update_user("- Name: Ann", section="Profile", replace_section=True)

    assert answer == (
        f"Replaced ## Profile in USER.md (version {version + 1}). Removed 1 entry "
        "('Time zone: Europe/Berlin')."
    )
    assert user_md(store)[0] == "# USER.md\n\n## Profile\n- Name: Ann\n"


PREFERENCES = "# USER.md\n\n## Preferences\n- Likes short answers.\n- No meetings before 10.\n"


async def test_update_user_refuses_to_drop_plain_bullets_and_names_them(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    # Entries as MEMORY.md's guard counts them, not only "- key: value" facts: a section of
    # plain bullets replaced by one line went without a word.
    version = await given(sync, FileKind.USER, PREFERENCES)

    answer = await tools.update_user("- Prefers email.", section="Preferences")

    assert answer == (
        "error: without key, content replaces the whole body of ## Preferences, and this one "
        "would remove 2 of its 2 entries ('Likes short answers.', 'No meetings before 10.'). "
        "Keep those lines in content, set one fact with key, or pass replace_section=true to "
        "remove them; nothing was written"
    )
    assert answer.failed
    assert user_md(store) == (PREFERENCES, version)

    replaced = await tools.update_user(
        "- Prefers email.", section="Preferences", replace_section=True
    )
    assert replaced == (
        f"Replaced ## Preferences in USER.md (version {version + 1}). Removed 2 entries "
        "('Likes short answers.', 'No meetings before 10.')."
    )


async def test_update_user_counts_facts_and_plain_bullets_together(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    user = "# USER.md\n\n## Profile\n- Name: Ann\n- Pronouns:\n- Vegetarian since 2020.\n"
    version = await given(sync, FileKind.USER, user)

    # The fact kept with a new value and the empty Pronouns dropped remove nothing...
    dropped = await tools.update_user("- Name: Anna\n- Vegetarian since 2020.", section="Profile")
    assert dropped == f"Replaced ## Profile in USER.md (version {version + 1})."
    # ...but the plain bullet is an entry: of the two, it is the one named.
    answer = await tools.update_user("- Name: Anna\n- Eats fish again.", section="Profile")
    assert answer == (
        "error: without key, content replaces the whole body of ## Profile, and this one "
        "would remove 1 of its 2 entries ('Vegetarian since 2020.'). Keep those lines in "
        "content, set one fact with key, or pass replace_section=true to remove them; nothing "
        "was written"
    )
    assert user_md(store)[1] == version + 1
