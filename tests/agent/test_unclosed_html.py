"""An HTML block that only its end ends (``<!--`` to ``-->``, ``<pre>`` to ``</pre>``,
``<?`` to ``?>``, ``<!X`` to ``>``, ``<![CDATA[`` to ``]]>``) left open runs to the end of
the file, blank lines and later sections included, as a fence left open does
(``tests/agent/test_unclosed_fence.py``), and the tools treat it the same way. Through the
memory tools, against a real DB and sandbox: agent text that would leave one open is
refused and nothing is written; one a person left open is never removed with the text
after it, and closing it before added lines is noted; the prompt closes one its text
ends in before the marker and the close tag."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given as for_all
from hypothesis import settings
from hypothesis import strategies as st

from memstrata.agent import markdown_closing, markdown_doc, sections
from memstrata.agent.markdown_blocks import may_run_on
from memstrata.agent.prompt import build_system_prompt
from memstrata.agent.prompt_body import MemoryBody, close_fence
from memstrata.agent.tools import MemoryTools
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.retrieval.tokenize import count_tokens
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory, user_md
from tests.agent.test_list_items import _LINE as LIST_LINES
from tests.agent.test_quote_html_blocks import _BLOCK_LINE, commonmark_blocks
from tests.agent.tool_support import FULL_MEMORY, given

pytestmark = pytest.mark.anyio


def section_titles(text: str) -> list[str]:
    return sections.section_titles(markdown_doc.parse(text))


def refused_html(number: int, opening: str, end: str, file: str) -> str:
    return (
        f"error: content opens an HTML block on line {number} ({opening!r}) that it never "
        f"closes, so everything after it in {file}, later sections too, would read as part "
        f"of it; add the closing {end} after it, or remove it"
    )


# -- agent text that opens an HTML block and never closes it ----------------------------------


@pytest.mark.parametrize(
    ("body", "number", "opening", "end"),
    [
        ("- 2026-03-01: Drafts below.\n<!-- drafts\n- one\n\n- two", 2, "<!-- drafts", "-->"),
        ("Run it:\n<script src='x.js'>\nrun()", 2, "<script src='x.js'>", "</script>"),
        ("<?php echo 1;", 1, "<?php echo 1;", "?>"),
        ("<!DOCTYPE html", 1, "<!DOCTYPE html", ">"),
        ("<![CDATA[ raw", 1, "<![CDATA[ raw", "]]>"),
    ],
)
async def test_a_section_body_that_leaves_an_html_block_open_is_refused(
    tools: MemoryTools,
    sync: SyncService,
    store: MemoryStore,
    body: str,
    number: int,
    opening: str,
    end: str,
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)

    answer = await tools.update_long_term_memory(body, section="Decisions", replace_section=True)

    assert answer.failed
    assert answer == refused_html(number, opening, end, "MEMORY.md")
    assert memory(store) == (FULL_MEMORY, version)
    # Closed as the answer says, it is written, and the sections after it stay sections.
    answer = await tools.update_long_term_memory(
        f"{body}\n{end}", section="Decisions", replace_section=True
    )
    # The entries it replaced are listed (agent.removals).
    assert answer.startswith(
        f"Replaced ## Decisions in MEMORY.md (version {version + 1}). Removed "
    )
    assert section_titles(memory(store)[0]) == ["Decisions", "Ongoing", "Lessons"]


async def test_update_user_refuses_a_body_that_leaves_a_comment_open(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    text = "# USER.md\n\n## Profile\n- Name: Ann\n\n## Work\n- Role: engineer\n"
    version = await given(sync, FileKind.USER, text)

    answer = await tools.update_user(
        "- Name: Ann\n<!-- old: Anna", section="Profile", replace_section=True
    )

    assert answer == refused_html(2, "<!-- old: Anna", "-->", "USER.md")
    assert user_md(store) == (text, version)
    # A value is one line written after "- key: ", where "<!--" opens no block.
    answer = await tools.update_user("<!-- x", section="Profile", key="Note")
    assert not answer.failed
    assert section_titles(user_md(store)[0]) == ["Profile", "Work"]


async def test_a_whole_file_that_leaves_an_html_block_open_is_refused(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)
    long = "<!-- " + "an old note about the billing migration " * 3
    content = f"# MEMORY.md\n\n## Decisions\n{long}\n\n## Ongoing\n- x\n"

    answer = await tools.update_long_term_memory(content, whole_file=True)

    # The opening line is quoted cut to its start.
    assert answer == refused_html(4, long[:40] + "…", "-->", "MEMORY.md")
    assert memory(store) == (FULL_MEMORY, version)


async def test_html_blocks_that_close_or_end_with_their_entry_are_written(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)
    # A comment closed on a later line; one inside an entry, which the end of the entry
    # ends; a "<div>", which a blank line ends.
    body = "<!-- drafts\n\n-->\n- 2026-03-01: a\n  <!-- not closed\n\n<div>\nx"

    answer = await tools.update_long_term_memory(body, section="Decisions", replace_section=True)
    recorded = await tools.record_memory("See:\n<!-- later lines are the entry's", "Lessons")

    # The entries it replaced are listed (agent.removals).
    assert answer.startswith(
        f"Replaced ## Decisions in MEMORY.md (version {version + 1}). Removed "
    )
    assert recorded == f"Recorded in MEMORY.md under ## Lessons (version {version + 2})."
    assert body in memory(store)[0]
    assert section_titles(memory(store)[0]) == ["Decisions", "Ongoing", "Lessons"]


# -- an HTML block a person left open -----------------------------------------------------------

PERSON_MEMORY = """# MEMORY.md

## Decisions
- 2026-02-01: Chose PostgreSQL 15 for billing.
<!-- old decisions, to sort out
- 2026-01-01: Chose MySQL.

## Ongoing
- 2026-02-03: Migrating billing (deadline: March).
"""


async def test_a_section_an_html_block_opens_in_and_leaves_open_is_never_replaced(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, PERSON_MEMORY)
    assert section_titles(PERSON_MEMORY) == ["Decisions"]
    assert commonmark_blocks(PERSON_MEMORY)[1] == {4, 5, 7, 8}

    replaced = await tools.update_long_term_memory("- 2026-03-01: only this", "Decisions")

    assert replaced == (
        "error: ## Decisions runs to the end of MEMORY.md: its line 5 opens an HTML block "
        "('<!-- old decisions, to sort out') that never closes, so every line after it is "
        "part of it, and replacing its body would remove them all; nothing was written. "
        "Close it first with a line of --> (update_long_term_memory with whole_file=true)"
    )
    assert memory(store) == (PERSON_MEMORY, version)


async def test_a_section_before_an_open_html_block_is_replaced(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    text = "## A\n- a\n\n## B\n<pre>\ncode\n\n## C\n"
    version = await given(sync, FileKind.MEMORY, text)

    answer = await tools.update_long_term_memory("- 2026-03-01: new", "A", replace_section=True)

    # The entries it replaced are listed (agent.removals).
    assert answer.startswith(f"Replaced ## A in MEMORY.md (version {version + 1}). Removed ")
    assert memory(store)[0] == text.replace("- a\n", "- 2026-03-01: new\n")


async def test_an_entry_added_after_an_open_html_block_says_it_closed_it(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, PERSON_MEMORY)

    answer = await tools.record_memory("Ship the importer", section="Ongoing")

    assert answer == (
        f"Recorded in MEMORY.md under ## Ongoing (version {version + 1}). New section: "
        "MEMORY.md had no ## Ongoing (its sections: Decisions). Note: line 5 of MEMORY.md "
        "opens an HTML block ('<!-- old decisions, to sort out') that never closed, so the "
        "lines after it were part of it; a line of --> now closes it before the new lines."
    )
    stored = memory(store)[0]
    assert stored == PERSON_MEMORY + "-->\n\n## Ongoing\n- 2026-03-01: Ship the importer\n"
    assert section_titles(stored) == ["Decisions", "Ongoing"]
    # Closed, it is no longer noted.
    answer = await tools.record_memory("Review the importer", section="Ongoing")
    assert answer == f"Recorded in MEMORY.md under ## Ongoing (version {version + 2})."


async def test_set_key_after_an_open_script_block_closes_it_with_its_own_tag(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    text = "# USER.md\n\n## Profile\n- Name: Ann\n<script>\nsign()\n\n## Work\n- Role: dev\n"
    await given(sync, FileKind.USER, text)

    answer = await tools.update_user("Berlin", section="Profile", key="City")

    assert not answer.failed
    assert answer.endswith(
        "Note: line 5 of USER.md opens an HTML block ('<script>') that never closed, so the "
        "lines after it were part of it; a line of </script> now closes it before the new "
        "lines."
    )
    assert user_md(store)[0] == text + "</script>\n- City: Berlin\n"
    doc = markdown_doc.parse(user_md(store)[0])
    profile = sections.find_section(doc, "Profile")
    assert profile is not None and sections.find_key(doc, profile, "City") is not None


# -- the prompt -----------------------------------------------------------------------------------


def test_the_prompt_closes_an_html_block_its_text_ends_in() -> None:
    # At the margin (it runs on), in the last entry (indented into it), and not when closed.
    assert close_fence("- a\n<!-- drafts\n- b") == "- a\n<!-- drafts\n- b\n-->"
    assert close_fence("- a\n- <pre>\n  x") == "- a\n- <pre>\n  x\n  </pre>"
    assert close_fence("- a\n   <?x\n   y") == "- a\n   <?x\n   y\n   ?>"
    assert close_fence("<!-- a -->\n<div>\nx") == "<!-- a -->\n<div>\nx"
    body = MemoryBody("## A\n- a\n- b\n- c\n<!-- drafts\n- d")
    assert body.closing == "-->"
    for dropped in range(len(body.order)):
        assert body.shown(dropped).endswith("\n<!-- drafts\n- d\n-->")


def _wrapped(text: str) -> int:
    """``count_tokens`` behind another function: the prompt counts it whole, not by parts."""
    return count_tokens(text)


@pytest.mark.parametrize("count", [count_tokens, _wrapped])
def test_a_cut_memory_ends_its_open_comment_before_the_marker(
    count: Callable[[str], int],
) -> None:
    notes = [f"- 2026-01-{d:02d}: note {d} about the release train" for d in range(1, 29)]
    text = "## Notes\n" + "\n".join(notes) + "\n<!-- drafts, not for the agent\n- a draft\n"

    result = build_system_prompt(
        agents_md="", soul="", user="", memory=text, token_limit=1500, count=count
    )

    assert result.truncated == ("MEMORY.md",)
    body, marker = result.text.rsplit("\n…[truncated: MEMORY.md", 1)
    assert "older entries left out" in marker and "- 2026-01-01:" not in body
    assert body.endswith("\n<!-- drafts, not for the agent\n- a draft\n-->")
    assert result.tokens == count_tokens(result.text) <= result.budget


def test_a_prefix_cut_ends_its_open_comment_before_the_marker() -> None:
    user = "- Name: Ann\n<!-- " + " ".join(f"old fact {i}." for i in range(200)) + "\n-->\n"

    result = build_system_prompt(
        agents_md="", soul="", user=user, memory="", token_limit=1000, count=count_tokens
    )

    assert result.truncated == ("USER.md",)
    head, marker = result.text.rsplit("\n…[truncated: USER.md", 1)
    assert head.endswith("\n-->") and head.count("-->") == 1
    assert marker.endswith("]\n</file>")
    assert result.tokens == count_tokens(result.text) <= result.budget


# -- the rules under the tools ------------------------------------------------------------------


def test_unclosed_html_names_the_line_that_opens_it_and_its_end() -> None:
    assert markdown_doc.unclosed_html(["a", "<!-- x -->", "<!--", "", "b"]) == (2, "-->")
    assert markdown_doc.unclosed_html(["<Style>", "p {}"]) == (0, "</Style>")
    assert markdown_doc.unclosed_html(["<textarea>", "</pre>"]) is None  # any raw tag ends it
    assert markdown_doc.unclosed_html(["- a", "  <!--"]) is None  # the entry's end ends it
    assert markdown_doc.unclosed_html(["<div>", "x"]) is None  # a blank line ends it
    assert markdown_doc.unclosed_html(["```", "<!--"]) is None  # code


@settings(max_examples=1000, deadline=None)
@for_all(st.lists(st.one_of(LIST_LINES, _BLOCK_LINE), max_size=20))
def test_the_closing_line_closes_what_is_open_and_is_never_skipped(lines: list[str]) -> None:
    # ``may_run_on`` lets the prompt skip the parse of a text whose comments all close: it
    # must never skip one that ends inside an HTML block.
    text = "\n".join(lines)
    doc = markdown_doc.parse(text)
    if doc.open_html is not None or doc.entry_html is not None:
        assert may_run_on(text)
    line = markdown_closing.closing_line_of(doc)
    assert markdown_closing.closing_line(text) == line
    if line is not None:
        closed = markdown_doc.parse(f"{text}\n{line}")
        assert (closed.open_fence, closed.entry_fence) == (None, None)
        assert (closed.open_html, closed.entry_html) == (None, None)
