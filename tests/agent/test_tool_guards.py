"""The memory tools' guards against a slip of the model, against a real DB and sandbox: a
left-out argument never wipes memory, a repeated heading never splits a section, and an
answer over the size limit names the tool that shrinks the file."""

from __future__ import annotations

import pytest

from memstrata.agent.tools import MemoryTools, ToolContext
from memstrata.db.database import Database
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.sandbox.local import LocalSandboxProvider
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory, user_md
from tests.agent.tool_support import FULL_MEMORY, given
from tests.sandbox.support import USER

pytestmark = pytest.mark.anyio


FULL_USER = """# USER.md

## Profile
- Name: Ann
- Pronouns:
- Time zone: Europe/Berlin
- Languages: German, English

## Work
- Role: engineer
"""


# -- H2: a left-out argument never replaces a whole file or section ---------------------------


async def test_update_long_term_memory_without_section_refuses_and_says_what_is_at_stake(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)

    answer = await tools.call(
        "update_long_term_memory", {"content": "- 2026-03-01: Tea, not coffee (corrected)."}
    )

    assert answer == (
        "error: without section, this would replace the whole of MEMORY.md, which has 5 "
        "entries in 3 sections (Decisions, Ongoing, Lessons); nothing was written. Pass "
        "section='…' to replace one section's body, or whole_file=true to replace the whole "
        "file"
    )
    assert answer.failed
    assert memory(store) == (FULL_MEMORY, version)
    # A client sending every field, the unset ones as null, is refused the same way.
    nulls = {"content": "- x", "section": None, "whole_file": None}
    assert (await tools.call("update_long_term_memory", nulls)) == answer
    assert (await tools.call("update_long_term_memory", {**nulls, "whole_file": False})) == answer
    assert memory(store) == (FULL_MEMORY, version)


async def test_update_long_term_memory_replaces_the_whole_file_only_when_asked(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)

    both = await tools.call(
        "update_long_term_memory", {"content": "- x", "section": "Ongoing", "whole_file": True}
    )
    assert both == (
        "error: pass section to replace one section's body, or whole_file=true without "
        "section to replace the whole file, not both"
    )
    typed = await tools.call("update_long_term_memory", {"content": "- x", "whole_file": "true"})
    assert typed == "error: whole_file must be a JSON boolean"
    assert memory(store) == (FULL_MEMORY, version)

    # whole_file is the model saying it means to replace the file (memory_write's
    # replace_all): removing most of it is written, and the answer says what went.
    answer = await tools.call(
        "update_long_term_memory", {"content": "# MEMORY.md\n- only this", "whole_file": True}
    )
    assert answer == (
        f"Replaced the whole of MEMORY.md (version {version + 1}). Removed 5 entries "
        "('2026-02-01: Chose PostgreSQL 15 for billing.', '2026-02-02: Weekly syncs on "
        "Tuesday.', '2026-02-03: Migrating billing (deadline: March).', '2026-02-04: "
        "Reviewing vendor contract 49.', '2026-02-05: Ask before deleting data.') and 3 "
        "sections (Decisions, Ongoing, Lessons)."
    )
    assert memory(store) == ("# MEMORY.md\n- only this\n", version + 1)


async def test_a_whole_file_rewrite_says_which_entries_it_removed(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    """By memory_write's rule (``agent.removals``): an entry by its text, its date aside,
    so the one redated stays; the one left out is named; a rewrite that removes nothing
    says nothing more."""
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)
    new = FULL_MEMORY.replace("- 2026-02-02: Weekly syncs on Tuesday.\n", "").replace(
        "2026-02-05: Ask", "2026-03-01: Ask"
    )
    answer = await tools.update_long_term_memory(new, whole_file=True)
    assert answer == (
        f"Replaced the whole of MEMORY.md (version {version + 1}). "
        "Removed 1 entry ('2026-02-02: Weekly syncs on Tuesday.')."
    )
    assert memory(store) == (new, version + 1)
    added = new + "- 2026-03-02: Tea, not coffee.\n"
    answer = await tools.update_long_term_memory(added, whole_file=True)
    assert answer == f"Replaced the whole of MEMORY.md (version {version + 2})."


async def test_update_user_without_key_refuses_a_lone_key_value_line(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.USER, FULL_USER)

    answer = await tools.call("update_user", {"section": "Profile", "content": "Pronouns: she/her"})

    assert answer == (
        "error: content is one 'Key: value' line, and without key it would replace the whole "
        "body of ## Profile (Name, Pronouns, Time zone, Languages). Did you mean "
        "key='Pronouns', content='she/her'? To replace the body with this line anyway, pass "
        "replace_section=true"
    )
    assert answer.failed
    assert user_md(store) == (FULL_USER, version)

    # The call it suggests sets the one fact and keeps the others.
    fixed = await tools.update_user("she/her", section="Profile", key="Pronouns")
    assert fixed == f"Set Pronouns under ## Profile in USER.md (version {version + 1})."
    assert "- Name: Ann\n- Pronouns: she/her\n- Time zone: Europe/Berlin\n" in user_md(store)[0]


async def test_update_user_without_key_refuses_to_drop_facts_unless_asked(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.USER, FULL_USER)

    answer = await tools.update_user("- Name: Ann\n- Pronouns: she/her", section="profile")

    assert answer == (
        "error: without key, content replaces the whole body of ## Profile, and this one "
        "would remove 2 of its 3 entries ('Time zone: Europe/Berlin', 'Languages: German, "
        "English'). Keep those lines in content, set one fact with key, or pass "
        "replace_section=true to remove them; nothing was written"
    )
    assert user_md(store) == (FULL_USER, version)

    # A body that keeps every fact with a value (the empty Pronouns may go) is fine...
    keeps = "- Name: Ann\n- Time zone: Europe/Berlin\n- **Languages**: German"
    assert await tools.update_user(keeps, section="Profile") == (
        f"Replaced ## Profile in USER.md (version {version + 1})."
    )
    # ...and so is dropping facts when the call says so.
    dropped = await tools.update_user("- Name: Ann", section="Profile", replace_section=True)
    assert dropped == (
        f"Replaced ## Profile in USER.md (version {version + 2}). Removed 2 entries "
        "('Time zone: Europe/Berlin', '**Languages**: German')."
    )
    assert "## Profile\n- Name: Ann\n\n## Work\n" in user_md(store)[0]
    both = await tools.update_user("x", section="Profile", key="Name", replace_section=True)
    assert both == (
        "error: pass key to set one '- key: value' line, or replace_section=true without key "
        "to replace the section's whole body, not both"
    )


async def test_update_user_without_key_still_writes_sections_without_facts(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.USER, FULL_USER)
    notes = "Prefers short answers.\nNo meetings before 10."
    assert await tools.update_user(notes, section="Habits") == (
        f"Replaced ## Habits in USER.md (version {version + 1}). New section: USER.md had "
        "no ## Habits (its sections: Profile, Work)."
    )
    assert user_md(store)[0].endswith(f"## Habits\n{notes}\n")


# -- M1: a body never adds a second section of the same name ---------------------------------


@pytest.mark.parametrize("heading", ["## Decisions", "# decisions", "##   DECISIONS  ##"])
async def test_a_body_that_repeats_its_heading_keeps_one_section(
    heading: str, tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)
    body = f"\n{heading}\n- 2026-03-01: Chose PostgreSQL for billing (corrected)."

    answer = await tools.update_long_term_memory(body, section="Decisions", replace_section=True)

    # The entries it replaced are listed (agent.removals).
    assert answer.startswith(
        f"Replaced ## Decisions in MEMORY.md (version {version + 1}). Removed "
    )
    content = memory(store)[0]
    assert content.count("Decisions") == 1
    assert (
        "## Decisions\n- 2026-03-01: Chose PostgreSQL for billing (corrected).\n\n## Ongoing"
        in (content)
    )


async def test_a_body_with_another_section_heading_is_refused(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)
    body = "- 2026-03-01: a\n\n## Lessons\n- 2026-03-01: b"

    answer = await tools.update_long_term_memory(body, section="Decisions", replace_section=True)

    assert answer == (
        "error: content is the body of ## Decisions and must not hold the heading "
        "'## Lessons': leave it out, use '###' for a subheading, and make one call per section "
        "of MEMORY.md"
    )
    user = await tools.update_user("- a\n# About", section="Work", replace_section=True)
    assert user.startswith("error: content is the body of ## Work and must not hold the heading")
    assert memory(store) == (FULL_MEMORY, version)
    # A heading inside a fenced code block is code, and '###' belongs to the section.
    fenced = "```\n## not a heading\n```\n### Sub\n- b"
    assert (
        await tools.update_long_term_memory(fenced, section="Decisions", replace_section=True)
    ).startswith("Replaced ## Decisions")


async def test_an_answer_points_out_a_section_the_file_holds_twice(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    twice = FULL_MEMORY + "\n## Decisions\n- 2026-02-09: Chose PostgreSQL 17.\n"
    version = await given(sync, FileKind.MEMORY, twice)

    answer = await tools.record_memory("Ship on Fridays.", section="decisions")

    assert answer == (
        f"Recorded in MEMORY.md under ## Decisions (version {version + 1}). Note: MEMORY.md "
        "has 2 sections named ## Decisions, and these tools edit only the first; merge them "
        "(update_long_term_memory with whole_file=true)."
    )


# -- M4: the size error names the tool that shrinks that file -------------------------------


async def test_a_user_md_over_the_size_limit_names_update_user(
    db: Database, templates: TemplateSet, provider: LocalSandboxProvider
) -> None:
    limit = len(templates.load(FileKind.USER).encode()) + 100  # MEMORY.md's fits too
    small = MemoryStore(db.sessions, templates, max_content_bytes=limit)
    sync = SyncService(small, provider)
    await sync.start_session(USER)
    tools = MemoryTools(ToolContext.bind(USER, sync, provider.for_user(USER)))

    answer = await tools.update_user("x" * 500, section="Profile", key="Bio")

    assert answer.startswith("error: USER.md would be ")
    assert answer.endswith(
        f"bytes, over the {limit}-byte limit; remove outdated facts first: update_user without "
        "key (and with replace_section=true) rewrites one section without them"
    )
    assert "update_long_term_memory" not in answer
