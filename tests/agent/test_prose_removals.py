"""A section replacement (``update_long_term_memory`` with ``section``, ``update_user``
without ``key``) never drops a section's prose without a word, as it never drops an entry:
a paragraph, a subheading, a code block or a quote the new body no longer holds is refused
unless ``replace_section``, and a replacement with it says what went. The rule
(:func:`memstrata.agent.removals.text_removed`) directly, then the tools against a real DB
and sandbox."""

from __future__ import annotations

import pytest

from memstrata.agent import markdown_doc, sections
from memstrata.agent.removals import text_removed
from memstrata.agent.tools import MemoryTools
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory, user_md
from tests.agent.tool_support import given

pytestmark = pytest.mark.anyio

BILLING = "We agreed to migrate the billing service to Postgres 18 in Q1."
BUDGET = "Budget approved: 40k EUR, owner Dana."
PLAN = f"# MEMORY.md\n\n## Plan\n{BILLING}\n\n{BUDGET}\n\n## Lessons\n- 2026-02-05: Ask first.\n"


def _removed(text: str, section: str, body: str) -> tuple[str, ...]:
    doc = markdown_doc.parse(text)
    span = sections.find_section(doc, section)
    assert span is not None
    return text_removed(doc, span, body)


def test_every_paragraph_a_body_lacks_is_named_by_its_first_line() -> None:
    assert _removed(PLAN, "Plan", "") == (repr(BILLING), repr(BUDGET))
    assert _removed(PLAN, "Plan", BUDGET) == (repr(BILLING),)


def test_a_paragraph_kept_reflowed_or_as_an_item_is_not_removed() -> None:
    reflowed = "We agreed to migrate\nthe billing service to POSTGRES 18 in Q1.\n\n- " + BUDGET
    assert _removed(PLAN, "Plan", reflowed) == ()
    assert _removed(PLAN, "Plan", f"{BILLING}\n\n{BUDGET}\n\nAnd one more.") == ()


def test_an_edited_paragraph_counts_as_removed() -> None:
    changed = BUDGET.replace("40k", "45k")
    assert _removed(PLAN, "Plan", f"{BILLING}\n\n{changed}") == (repr(BUDGET),)
    # A part of a word is no match: "ok." is not kept by "took."
    assert _removed("## A\nok.\n", "A", "took.") == ("'ok.'",)


def test_subheadings_code_and_quotes_count_entries_do_not() -> None:
    text = "## A\n### Sub\n```py\nx = 1\n```\n> quoted\n- 2026-01-01: an entry\n"
    assert _removed(text, "A", "") == ("'### Sub'", "'```py'")
    assert _removed(text, "A", "### Sub\n```py\nx = 1\n```\n> quoted") == ()


async def test_an_empty_body_does_not_drop_a_sections_paragraphs(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, PLAN)

    answer = await tools.call("update_long_term_memory", {"section": "Plan", "content": ""})

    assert answer == (
        "error: content replaces the whole body of ## Plan, and this one would remove 2 "
        f"paragraphs ({BILLING!r}, {BUDGET!r}). Keep those lines in content, or pass "
        "replace_section=true to remove them; nothing was written"
    )
    assert memory(store) == (PLAN, version)


async def test_update_user_without_key_does_not_drop_paragraphs(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    text = "# USER.md\n\n## Notes\nPrefers calls after 10am.\n\nHas two kids, Ana and Rui.\n"
    version = await given(sync, FileKind.USER, text)

    answer = await tools.call("update_user", {"section": "Notes", "content": "x"})

    assert answer.failed
    assert "without key, content replaces the whole body of ## Notes" in answer
    assert "would remove 2 paragraphs ('Prefers calls after 10am.', 'Has two kids" in answer
    assert user_md(store) == (text, version)


async def test_entries_and_paragraphs_are_named_in_one_refusal(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    text = f"# MEMORY.md\n\n## Plan\n{BILLING}\n\n- 2026-02-01: Chose Dana as owner.\n"
    version = await given(sync, FileKind.MEMORY, text)

    answer = await tools.update_long_term_memory("Short summary.", section="Plan")

    assert answer == (
        "error: content replaces the whole body of ## Plan, and this one would remove 1 of "
        "its 1 entry ('2026-02-01: Chose Dana as owner.') and 1 paragraph "
        f"({BILLING!r}). Keep those lines in content, correct one entry with "
        "record_memory's replaces, or pass replace_section=true to remove them; nothing was "
        "written"
    )
    assert memory(store) == (text, version)


async def test_replace_section_true_replaces_and_says_what_went(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, PLAN)

    answer = await tools.call(
        "update_long_term_memory", {"section": "Plan", "content": "", "replace_section": True}
    )

    assert answer == (
        f"Replaced ## Plan in MEMORY.md (version {version + 1}). Removed 2 paragraphs "
        f"({BILLING!r}, {BUDGET!r})."
    )
    assert BILLING not in memory(store)[0]


async def test_a_body_that_keeps_the_paragraphs_needs_no_flag(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, PLAN)

    answer = await tools.update_long_term_memory(
        f"{BILLING}\n\n{BUDGET}\n\nKick-off on 2026-01-12.", section="Plan"
    )

    assert answer == f"Replaced ## Plan in MEMORY.md (version {version + 1})."
