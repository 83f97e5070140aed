"""A fence (``` or ~~~) left open runs to the end of a file, so every later line — later
sections too — is code to the tools, the prompt's cut and CommonMark. Through the memory
tools, against a real DB and sandbox: agent text that would leave one open is refused and
nothing is written; a fence a person left open is kept as written, closed before lines a
tool adds after it, and never removed with the text after it."""

from __future__ import annotations

import pytest

from memstrata.agent import entries, markdown_doc, sections
from memstrata.agent.tools import MemoryTools
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory, user_md
from tests.agent.tool_support import FULL_MEMORY, given

pytestmark = pytest.mark.anyio


def section_titles(text: str) -> list[str]:
    return sections.section_titles(markdown_doc.parse(text))


# -- agent text that opens a fence and never closes it ---------------------------------------


@pytest.mark.parametrize("fence", ["```", "~~~~"])
async def test_a_section_body_that_leaves_a_fence_open_is_refused(
    tools: MemoryTools, sync: SyncService, store: MemoryStore, fence: str
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)

    answer = await tools.update_long_term_memory(
        f"- 2026-03-01: Run the tests with:\n{fence}sh\nmake test\n", section="Decisions"
    )

    assert answer.failed
    assert answer == (
        f"error: content opens a {fence} fence on line 2 that it never closes, so everything "
        "after it in MEMORY.md, later sections too, would read as code; close it with a line "
        f"of {fence} after the code, or remove it"
    )
    assert memory(store) == (FULL_MEMORY, version)
    # The next call still finds the sections after Decisions: no second "## Ongoing".
    answer = await tools.record_memory("Finish the migration", section="Ongoing")
    assert answer == f"Recorded in MEMORY.md under ## Ongoing (version {version + 1})."
    assert section_titles(memory(store)[0]) == ["Decisions", "Ongoing", "Lessons"]


async def test_a_closed_fence_in_a_section_body_is_written(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)
    body = "- Run the tests with:\n  ```sh\n  make test\n  ```\n\n```\n## not a heading\n```"

    answer = await tools.update_long_term_memory(body, section="Decisions", replace_section=True)

    # The entries it replaced are listed (agent.removals).
    assert answer.startswith(
        f"Replaced ## Decisions in MEMORY.md (version {version + 1}). Removed "
    )
    assert body in memory(store)[0]
    assert section_titles(memory(store)[0]) == ["Decisions", "Ongoing", "Lessons"]


async def test_update_user_refuses_a_body_that_leaves_a_fence_open(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    text = "# USER.md\n\n## Profile\n- Name: Ann\n\n## Work\n- Role: engineer\n"
    version = await given(sync, FileKind.USER, text)

    answer = await tools.update_user(
        "- Name: Ann\n- Signature:\n~~~\nAnn, Berlin", section="Profile", replace_section=True
    )

    assert answer == (
        "error: content opens a ~~~ fence on line 3 that it never closes, so everything after "
        "it in USER.md, later sections too, would read as code; close it with a line of ~~~ "
        "after the code, or remove it"
    )
    assert user_md(store) == (text, version)
    # A value is one line, written after "- key: ": it can open no fence.
    answer = await tools.update_user("```", section="Profile", key="Signature")
    assert not answer.failed
    assert section_titles(user_md(store)[0]) == ["Profile", "Work"]


async def test_record_memory_refuses_an_entry_that_starts_with_a_fence(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)

    # Closed as the agent sent it, but its first line follows the entry's date, where it
    # opens nothing: the line meant to close the fence would open one.
    answer = await tools.record_memory("```py\nprint('hi')\n```", section="Lessons")

    assert answer == (
        "error: content starts with a ``` fence, but an entry's first line is written after "
        "its date ('- YYYY-MM-DD: ```py'), where it opens no code block, so the ``` on line 3 "
        "would open one instead of closing it, and the code would read as text. Start "
        "content with a line saying what the code is, then the fenced block"
    )
    assert memory(store) == (FULL_MEMORY, version)
    answer = await tools.record_memory("Say hi:\n```py\nprint('hi')\n```", section="Lessons")
    assert not answer.failed
    assert "- 2026-03-01: Say hi:\n  ```py\n  print('hi')\n  ```\n" in memory(store)[0]
    assert markdown_doc.open_fence(memory(store)[0]) is None


async def test_a_whole_file_that_leaves_a_fence_open_is_refused(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)
    content = "# MEMORY.md\n\n## Decisions\n```\ncode\n\n## Ongoing\n- x\n"

    answer = await tools.update_long_term_memory(content, whole_file=True)

    assert answer.startswith("error: content opens a ``` fence on line 4 that it never closes")
    assert memory(store) == (FULL_MEMORY, version)
    # Without whole_file nothing is written either way: that refusal comes first.
    answer = await tools.update_long_term_memory(content)
    assert answer.startswith("error: without section, this would replace the whole of")


# -- a fence a person left open ----------------------------------------------------------------

# The user pasted a snippet at the margin under Decisions and forgot the closing fence: to
# every reader, the rest of the file is code inside ## Decisions. (Under an entry, indented,
# the end of the entry would end it: tests/agent/test_entry_fences.py.)
PERSON_MEMORY = """# MEMORY.md

## Decisions
- 2026-02-01: Chose PostgreSQL 15 for billing.
- 2026-02-02: Connect with:
```
psql billing

## Ongoing
- 2026-02-03: Migrating billing (deadline: March).
"""


async def test_lines_added_after_a_persons_open_fence_close_it_first(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, PERSON_MEMORY)
    assert section_titles(PERSON_MEMORY) == ["Decisions"]

    answer = await tools.record_memory("Ship the importer", section="Ongoing")

    assert answer == (
        f"Recorded in MEMORY.md under ## Ongoing (version {version + 1}). New section: "
        "MEMORY.md had no ## Ongoing (its sections: Decisions). Note: line 6 of MEMORY.md "
        "opens a ``` fence that never closed, so the lines after it read as code; a line of "
        "``` now closes it before the new lines."
    )
    stored = memory(store)[0]
    # The person's text is kept as written (still code, as before); the new section is not.
    assert stored == PERSON_MEMORY + "```\n\n## Ongoing\n- 2026-03-01: Ship the importer\n"
    assert section_titles(stored) == ["Decisions", "Ongoing"]
    # The next call finds that section: no third "## Ongoing", and the same entry is seen.
    answer = await tools.record_memory("Ship the importer", section="Ongoing")
    assert answer == "No change: MEMORY.md already has this entry under ## Ongoing (2026-03-01)."
    answer = await tools.record_memory("Review the importer", section="Ongoing")
    assert answer == f"Recorded in MEMORY.md under ## Ongoing (version {version + 2})."
    assert memory(store)[0].endswith("Ship the importer\n- 2026-03-01: Review the importer\n")


async def test_an_entry_appended_to_the_section_of_an_open_fence_closes_it_first(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    await given(sync, FileKind.MEMORY, PERSON_MEMORY)

    answer = await tools.record_memory("Keep billing on 15", section="Decisions")

    assert not answer.failed and "a line of ``` now closes it" in answer
    stored = memory(store)[0]
    assert stored == PERSON_MEMORY.rstrip("\n") + "\n```\n- 2026-03-01: Keep billing on 15\n"
    decisions = [
        e.text for e in entries.entries(markdown_doc.parse(stored)) if e.section == "Decisions"
    ]
    assert decisions[-1] == "Keep billing on 15"


async def test_set_key_after_a_persons_open_fence_closes_it_first(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    text = "# USER.md\n\n## Profile\n- Name: Ann\n~~~\nsignature\n\n## Work\n- Role: dev\n"
    await given(sync, FileKind.USER, text)

    answer = await tools.update_user("Berlin", section="Profile", key="City")

    assert not answer.failed and "line 5 of USER.md opens a ~~~ fence" in answer
    assert user_md(store)[0] == text + "~~~\n- City: Berlin\n"
    doc = markdown_doc.parse(user_md(store)[0])
    profile = sections.find_section(doc, "Profile")
    assert profile is not None and sections.find_key(doc, profile, "City") is not None


async def test_text_after_a_persons_open_fence_is_never_removed_with_it(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, PERSON_MEMORY)

    replaced = await tools.update_long_term_memory("- 2026-03-01: only this", "Decisions")

    assert replaced == (
        "error: ## Decisions runs to the end of MEMORY.md: its line 6 opens a ``` fence that "
        "never closes, so every line after it is code inside it, and replacing its body would "
        "remove them all; nothing was written. Close the fence first (update_long_term_memory "
        "with whole_file=true)"
    )
    assert memory(store) == (PERSON_MEMORY, version)
    # The entries before the fence go as asked (no entry holds it: a fence at the margin
    # ends the entry above it); the fence and what follows it stay.
    answer = await tools.record_memory("Connect with psql", replaces="Connect with:")
    assert not answer.failed
    answer = await tools.record_memory("Chose PostgreSQL 16", replaces="Chose PostgreSQL 15")
    assert not answer.failed
    stored = memory(store)[0]
    assert "Chose PostgreSQL 15" not in stored and "Connect with:" not in stored
    assert "## Decisions\n```\npsql billing\n\n## Ongoing\n- 2026-02-03: Migrating" in stored


# -- the rules under the tools ------------------------------------------------------------------


def test_unclosed_fence_names_the_line_that_opens_it() -> None:
    assert markdown_doc.unclosed_fence(["a", "```py", "x", "```", "~~~", "```"]) == (4, "~~~")
    assert markdown_doc.unclosed_fence(["  ````", "```", "x"]) == (0, "````")
    assert markdown_doc.unclosed_fence(["```", "x", "```"]) is None
    assert markdown_doc.unclosed_fence(["\ufeff```", "x"]) == (0, "```")  # a BOM is no text


def test_entry_lines_are_numbered_in_the_content() -> None:
    assert sections.entry_lines("\n first \n\n  second\u2028third ") == [
        (2, "first"),
        (4, "  second"),
        (5, "  third"),
    ]


def test_only_lines_added_after_an_open_fence_close_it() -> None:
    text = "## A\n- a\n\n## B\n- b\n```\ncode\n"
    # Before the fence: nothing to close, and the fence stays as the person left it.
    assert sections.append_to_section(text, "A", "- new") == text.replace("- a\n", "- a\n- new\n")
    assert sections.append_to_section(text, "B", "- new") == text + "```\n- new\n"
    # A CR LF file gets its closing line in CR LF, as every line a tool adds.
    crlf = text.replace("\n", "\r\n")
    assert sections.set_key(crlf, "C", "k", "v") == crlf + "```\r\n\r\n## C\r\n- k: v\r\n"
