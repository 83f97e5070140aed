"""A whole-file rewrite — MCP ``memory_write``, ``update_long_term_memory`` with
``whole_file`` — never drops a file's prose without a word, as a section replacement does
not: a paragraph, a subheading, a code block or a quote the new text no longer holds is
refused unless the caller says it means it (``replace_all``; ``replace_section`` with
``whole_file``), by the section guard's one rule
(:func:`memstrata.agent.removals.text_removed`). The rule over a whole file, the guard's
verdict, then ``update_long_term_memory`` against a real DB and sandbox."""

from __future__ import annotations

import pytest

from memstrata.agent import markdown_doc
from memstrata.agent.removals import removal, text_removed
from memstrata.agent.rewrite_guard import WOULD_REMOVE_TEXT, Refused, Store, rewrite_verdict
from memstrata.agent.tools import MemoryTools
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryFile, MemoryStore
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory
from tests.agent.tool_support import given

pytestmark = pytest.mark.anyio

INTRO = "Curated notes worth keeping across sessions."
BILLING = "We agreed to migrate the billing service to Postgres 18 in Q1."
MEMORY = (
    f"# MEMORY.md\n\n{INTRO}\n\n## Plan\n{BILLING}\n\n- 2026-02-01: Chose Dana as owner.\n\n"
    "## Lessons\n- 2026-02-05: Ask first.\n"
)
# The same file as a model rewrites it: every entry and section kept, the prose dropped.
ENTRIES_ONLY = (
    "# MEMORY.md\n\n## Plan\n- 2026-02-01: Chose Dana as owner.\n\n"
    "## Lessons\n- 2026-02-05: Ask first.\n- 2026-03-01: Re-read before rewriting.\n"
)
SOUL = (
    "# SOUL.md\n\nYou are this user's long-term assistant; the user may edit this file.\n\n"
    "## Voice\n- Short by default.\n"
)


def stored(kind: FileKind, content: str, version: int = 3) -> MemoryFile:
    return MemoryFile("alice", kind, content, version, None)


def test_the_rule_reads_the_whole_file_but_not_its_title_and_section_headings() -> None:
    doc = markdown_doc.parse(MEMORY)
    assert text_removed(doc, None, ENTRIES_ONLY) == (repr(INTRO), repr(BILLING))
    # A paragraph moved to another section, or made an item, is kept.
    moved = ENTRIES_ONLY.replace("## Lessons\n", f"## Lessons\n- {BILLING}\n") + f"\n{INTRO}\n"
    assert text_removed(doc, None, moved) == ()
    # The title and the '## ' headings are the file's structure: sections count those.
    assert text_removed(markdown_doc.parse("# T\n\n## A\n### Sub\n"), None, "") == ("'### Sub'",)
    assert removal(MEMORY, ENTRIES_ONLY, prose=True).paragraphs == (repr(INTRO), repr(BILLING))


def test_memory_write_dropping_a_paragraph_is_refused_unless_replace_all() -> None:
    verdict = rewrite_verdict(FileKind.MEMORY, ENTRIES_ONLY, stored(FileKind.MEMORY, MEMORY), 3)
    assert verdict == Refused(
        f"this would remove 2 paragraphs of MEMORY.md ({INTRO!r}, {BILLING!r}), text outside "
        "its entries (a reworded one counts as removed); nothing was written. memory_write "
        "replaces the whole file: send all of it with your change (memory_read gives the "
        "current text), use record_memory to add or correct one entry (replaces= names the "
        "old one), or pass replace_all=true if you mean to remove them",
        {
            "error": WOULD_REMOVE_TEXT,
            "entries_removed": 0,
            "entries": 2,
            "sections_removed": 0,
            "sections": 2,
            "paragraphs_removed": 2,
        },
    )
    forced = rewrite_verdict(
        FileKind.MEMORY, ENTRIES_ONLY, stored(FileKind.MEMORY, MEMORY), 3, replace_all=True
    )
    assert isinstance(forced, Store)
    assert forced.answer(4) == (
        f"Saved MEMORY.md as version 4. Removed 2 paragraphs ({INTRO!r}, {BILLING!r})."
    )


def test_a_soul_rewrite_of_one_line_is_refused_for_the_prose_it_drops() -> None:
    """SOUL.md is mostly prose: one line sent to add it wiped the rest, unrefused (one
    entry and one section removed is not most of the file)."""
    new = "# SOUL.md\n\n## Voice\n- Short by default.\n- Answer in French.\n"
    verdict = rewrite_verdict(FileKind.SOUL, new, stored(FileKind.SOUL, SOUL), 3)
    assert isinstance(verdict, Refused) and verdict.data["error"] == WOULD_REMOVE_TEXT
    assert verdict.message.startswith(
        "this would remove 1 paragraph of SOUL.md (\"You are this user's long-term assistant"
    )
    assert verdict.message.endswith("or pass replace_all=true if you mean to remove them")


def test_most_removed_and_prose_are_named_in_one_refusal() -> None:
    verdict = rewrite_verdict(FileKind.MEMORY, "- x\n", stored(FileKind.MEMORY, MEMORY), 3)
    assert isinstance(verdict, Refused) and verdict.data["error"] == "would_remove_most"
    assert verdict.data["paragraphs_removed"] == 2
    assert verdict.message.startswith(
        "this would remove 2 of the 2 entries of MEMORY.md ('2026-02-01: Chose Dana as owner.', "
        f"'2026-02-05: Ask first.'), 2 of its 2 sections (Plan, Lessons) and 2 paragraphs "
        f"({INTRO!r}, {BILLING!r}); nothing was written."
    )


def test_a_rewrite_that_keeps_the_prose_passes() -> None:
    new = MEMORY + "- 2026-03-01: Re-read before rewriting.\n"
    verdict = rewrite_verdict(FileKind.MEMORY, new, stored(FileKind.MEMORY, MEMORY), 3)
    assert isinstance(verdict, Store) and verdict.answer(4) == "Saved MEMORY.md as version 4."


async def test_whole_file_dropping_a_paragraph_is_refused_and_says_how_to_proceed(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, MEMORY)

    answer = await tools.call(
        "update_long_term_memory", {"content": ENTRIES_ONLY, "whole_file": True}
    )

    assert answer == (
        "error: whole_file replaces all of MEMORY.md, and this content would remove 2 "
        f"paragraphs ({INTRO!r}, {BILLING!r}), text outside its entries (a reworded one "
        "counts as removed). Keep them in content, or pass replace_section=true with "
        "whole_file=true to remove them; nothing was written"
    )
    assert memory(store) == (MEMORY, version)


async def test_whole_file_with_replace_section_removes_the_prose_and_says_so(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, MEMORY)

    answer = await tools.call(
        "update_long_term_memory",
        {"content": ENTRIES_ONLY, "whole_file": True, "replace_section": True},
    )

    assert answer == (
        f"Replaced the whole of MEMORY.md (version {version + 1}). Removed 2 paragraphs "
        f"({INTRO!r}, {BILLING!r})."
    )
    assert memory(store) == (ENTRIES_ONLY, version + 1)


async def test_replace_section_without_section_or_whole_file_is_still_refused(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, MEMORY)

    answer = await tools.call(
        "update_long_term_memory", {"content": ENTRIES_ONLY, "replace_section": True}
    )

    assert answer.failed and "replace_section goes with section or whole_file" in answer
    assert memory(store) == (MEMORY, version)
