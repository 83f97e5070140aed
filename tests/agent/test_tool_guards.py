"""The memory tools' guards against a slip of the model, against a real DB and sandbox: a
left-out argument never wipes memory, a repeated heading never splits a section, an entry
is never stored twice, an entry can be corrected in place, and every answer says how to
fix the call or what the call did to which section."""

from __future__ import annotations

from datetime import date

import pytest

from memstrata.agent.tools import MemoryTools, ToolContext
from memstrata.db.database import Database
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory, user_md
from tests.sandbox.support import USER

pytestmark = pytest.mark.anyio

DAY = date(2026, 3, 1)
LATER = date(2026, 3, 9)

FULL_MEMORY = """# MEMORY.md

## Decisions
- 2026-02-01: Chose PostgreSQL 15 for billing.
- 2026-02-02: Weekly syncs on Tuesday.

## Ongoing
- 2026-02-03: Migrating billing (deadline: March).
- 2026-02-04: Reviewing vendor contract 49.
  It runs out in June.

## Lessons
- 2026-02-05: Ask before deleting data.
"""

FULL_USER = """# USER.md

## Profile
- Name: Ann
- Pronouns:
- Time zone: Europe/Berlin
- Languages: German, English

## Work
- Role: engineer
"""


class Day:
    """A clock the test moves on."""

    def __init__(self) -> None:
        self.today = DAY

    def __call__(self) -> date:
        return self.today


@pytest.fixture
def clock() -> Day:
    return Day()


@pytest.fixture
async def tools(sync: SyncService, user_box: LocalDirectorySandbox, clock: Day) -> MemoryTools:
    await sync.start_session(USER)
    tracker = await sync.begin_round(USER)
    return MemoryTools(ToolContext.bind(USER, sync, user_box, tracker=tracker), today=clock)


async def given(sync: SyncService, kind: FileKind, content: str) -> int:
    """The user's file set to ``content`` as the memory settings page saves it."""
    return (await sync.frontend_edit(USER, kind, content)).version


def stored(store: MemoryStore, kind: FileKind) -> tuple[str, int]:
    return memory(store) if kind is FileKind.MEMORY else user_md(store)


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

    answer = await tools.call(
        "update_long_term_memory", {"content": "# MEMORY.md\n- only this", "whole_file": True}
    )
    assert answer == f"Replaced the whole of MEMORY.md (version {version + 1})."
    assert memory(store) == ("# MEMORY.md\n- only this\n", version + 1)


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
        "would remove Time zone, Languages. Keep those lines in content, set one fact with "
        "key, or pass replace_section=true to remove them; nothing was written"
    )
    assert user_md(store) == (FULL_USER, version)

    # A body that keeps every fact with a value (the empty Pronouns may go) is fine...
    keeps = "- Name: Ann\n- Time zone: Europe/Berlin\n- **Languages**: German"
    assert await tools.update_user(keeps, section="Profile") == (
        f"Replaced ## Profile in USER.md (version {version + 1})."
    )
    # ...and so is dropping facts when the call says so.
    dropped = await tools.update_user("- Name: Ann", section="Profile", replace_section=True)
    assert dropped == f"Replaced ## Profile in USER.md (version {version + 2})."
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

    answer = await tools.update_long_term_memory(body, section="Decisions")

    assert answer == f"Replaced ## Decisions in MEMORY.md (version {version + 1})."
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

    answer = await tools.update_long_term_memory(body, section="Decisions")

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
    assert (await tools.update_long_term_memory(fenced, section="Decisions")).startswith(
        "Replaced ## Decisions"
    )


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


async def test_record_memory_replaces_by_the_whole_line_or_into_another_section(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)
    # The line as the prompt shows it, date and bullet included; a multi-line entry goes whole.
    answer = await tools.record_memory(
        "Contract 49 signed.",
        section="Decisions",
        replaces="- 2026-02-04: Reviewing vendor contract 49. It runs out in June.",
    )
    assert answer.startswith("Recorded in MEMORY.md under ## Decisions and removed the entry ")
    content = memory(store)[0]
    assert "Reviewing vendor" not in content and "June" not in content
    assert "- 2026-02-02: Weekly syncs on Tuesday.\n- 2026-03-01: Contract 49 signed.\n" in content
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


# -- L1: a new section is announced, and a near miss named ------------------------------------


async def test_a_new_section_is_announced_with_a_close_match(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)

    near_miss = await tools.record_memory("Keep weekly syncs on Tuesday.", section="Decision")
    spelled = await tools.record_memory("Never on Fridays.", section="LESSONS")

    assert near_miss == (
        f"Recorded in MEMORY.md under ## Decision (version {version + 1}). New section: "
        "MEMORY.md had no ## Decision (its sections: Decisions, Ongoing, Lessons); did you "
        "mean 'Decisions'?"
    )
    assert spelled == f"Recorded in MEMORY.md under ## Lessons (version {version + 2})."
    user = await tools.update_user("Ann", section="User Profile", key="Name")
    assert user.endswith(
        "New section: USER.md had no ## User Profile (its sections: Profile, Work, "
        "Preferences); did you mean 'Profile'?"
    )


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
