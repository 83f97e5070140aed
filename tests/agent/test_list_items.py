"""Entries end where CommonMark's list items do: a thematic break (``---``, ``- - -``,
``* * *``, ``___``) is no entry and ends the one before it, and the lines of an item are
those indented as far as its text starts (``1. a`` takes lines three columns in, ``-   a``
four), not two columns for every marker. Pinned against CommonMark's reading
(markdown-it-py) over generated files — lists nested in items and fences on items' lines
among them (``test_nested_lists``) — and through the memory tools, against a real DB and
sandbox: a break between entries is neither counted, replaced nor removed, and stays where
it is."""

from __future__ import annotations

import pytest
from hypothesis import assume, settings
from hypothesis import given as for_all
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from memstrata.agent import entries, markdown_doc
from memstrata.agent.tools import MemoryTools
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.sync import SyncService
from tests.agent.md_lines import commonmark_lines, commonmark_text, with_free
from tests.agent.stored import memory
from tests.agent.test_entry_fences import commonmark_code
from tests.agent.tool_support import given

pytestmark = pytest.mark.anyio


def commonmark_items(text: str) -> list[tuple[int, int]]:
    """(first line, one past the last line that is not blank) of each top-level list item."""
    lines = text.split("\n")
    found: list[tuple[int, int]] = []
    for token in MarkdownIt("commonmark").parse(text):
        if token.type == "list_item_open" and token.level == 1 and token.map:
            start, end = token.map
            while end > start + 1 and not lines[end - 1].strip():
                end -= 1
            found.append((start, end))
    return found


def commonmark_headings(text: str) -> list[int]:
    """The lines of the ATX headings outside any list (setext ones are text to the tools:
    ``test_setext``)."""
    tokens = MarkdownIt("commonmark").parse(text)
    return [
        t.map[0]
        for t in tokens
        if t.type == "heading_open" and t.level == 0 and t.map and t.markup.startswith("#")
    ]


def markdown_it_misreads(text: str) -> bool:
    """Whether markdown-it-py ends a list item at a line four or more columns in, right
    under a line of a paragraph: it reads such a line as the block it would start without
    its indent (``  1. a`` then ``    ## b``: a heading ends the item), where the spec —
    and commonmark.js and cmark — read it, four columns past the container it is in, as a
    lazy line of the paragraph, and so does the reader. Such files are left out, and so
    are the few where markdown-it ends the item rightly, the line being less than four
    columns past the item it is read in (``- a``, ``  1. b``, ``    ## c``): about one in
    seven of the files drawn below."""
    tokens = MarkdownIt("commonmark").parse(text)
    lines = text.split("\n")
    paragraph = {i for t in tokens if t.type == "paragraph_open" and t.map for i in range(*t.map)}
    ends = {t.map[1] for t in tokens if t.type == "list_item_open" and t.map}
    return any(
        i - 1 in paragraph and lines[i].strip() and markdown_doc.indent(lines[i]) >= 4
        for i in ends
        if i < len(lines)
    )


def spans(text: str) -> list[tuple[int, int]]:
    return [(e.start, e.end) for e in entries.entries(markdown_doc.parse(text))]


def code(text: str) -> set[int]:
    doc = markdown_doc.parse(text)
    return {i for i in doc.code if doc.bare(i).strip()}


# -- the reader ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "items"),
    [
        ("- a\n- - -\n- b", [(0, 1), (2, 3)]),  # a break, not an item "- -"
        ("* a\n* * *\n* b", [(0, 1), (2, 3)]),
        ("- a\n---\n- b", [(0, 1), (2, 3)]),  # no lazy line of the entry: it ends it
        ("- a\n___", [(0, 1)]),
        ("- a\n  ---", [(0, 2)]),  # indented under the entry: its own
        ("1. a\n  b", [(0, 2)]),  # the paragraph goes on lazily
        ("1. a\n\n  b", [(0, 1)]),  # after a blank: three columns in, or not the item's
        ("1. a\n\n   b", [(0, 3)]),
        ("1. a\n  - b", [(0, 1), (1, 2)]),  # two columns in: an item of its own
        ("10) a\n\n   b", [(0, 1)]),
        ("10) a\n\n    b", [(0, 3)]),
        ("-   a\n\n  b", [(0, 1)]),
        ("-   a\n\n    b", [(0, 3)]),
        ("*  a\n\n  b", [(0, 1)]),
        ("*  a\n\n   b", [(0, 3)]),
        ("-      a\n\n  b", [(0, 3)]),  # five spaces: the text is code, the width 2
        ("-\ta\n\n  b", [(0, 1)]),  # a tab to column 4: the width is 4
        ("-\n\n  b", [(0, 1)]),  # a blank line ends an item without text
        ("text\n  - b", [(1, 2)]),  # an item up to three spaces in
        ("text\n2. b\n-", []),  # no item interrupts a paragraph but "1." and "- x"
    ],
)
def test_entries_are_commonmarks_list_items(text: str, items: list[tuple[int, int]]) -> None:
    assert commonmark_items(text) == items
    assert spans(text) == items


def test_a_fence_in_a_wide_item_is_read_within_it() -> None:
    text = "10) a\n    ```\n    ## code\n    ```\n## Notes\n- b"
    doc = markdown_doc.parse(text)
    assert doc.code == {1, 2, 3}
    assert spans(text) == [(0, 4), (5, 6)] == commonmark_items(text)
    assert [h.start for h in doc.headings()] == [4] == commonmark_headings(text)


# -- against CommonMark -------------------------------------------------------------------------

# Items of every marker and width, thematic breaks, and lines as far in as an item's text
# starts, short of it and past it; headings and fences at the margin and inside items;
# items nested at every width (their lines, fences and headings too), items in items on
# one line, and fences on an item's own line.
_LINE = st.sampled_from(
    [
        "## Notes",
        "- 2026-03-01: tea",
        "* b",
        "+ c",
        "1. one",
        "2) two",
        "10. ten",
        "-   wide",
        "*  two spaces",
        "-      code after five",
        "-\ttab",
        "-",
        "1.",
        " - one in",
        "  * two in",
        "- - -",
        "* * *",
        "---",
        "___",
        "  ***",
        "_ _ _ _",
        "  two",
        "   three",
        "    four",
        "     five",
        "text",
        " lazy",
        "\ttab in",
        "  ## nested",
        "   ## three in",
        "  - nested",
        "    - four in",
        "```",
        "  ```",
        "   ~~~",
        "    ```",
        "   1. three in",
        "  1. nested one",
        "  2. nested two",
        "     - five in",
        "      - six in",
        "      six",
        "        eight",
        "    ## four in",
        "  -",
        "    -",
        "- - a",
        "- 1. a",
        "- # h",
        "  - # h",
        "- * * *",
        "===",
        "     ```",
        "      ```",
        "  ~~~",
        "- ```py",
        "- ~~~",
        "1. ```",
        "  - ```",
        "    - ```sh",
        "  1. ~~~",
        "* ````",
        "-   ```",
        "- ```a`b",
        "\t- tab item",
        "  \t```",
        "",
        "",
    ]
)


# And free-form lines (``md_lines``), without a ">": ``commonmark_code`` counts a fence in
# a block quote, which is no code of the file's (test_quote_html_blocks reads quotes).
@settings(max_examples=1500, deadline=None)
@for_all(st.lists(with_free(_LINE, commonmark_lines(without=">")), max_size=20))
def test_entries_headings_and_code_read_as_commonmark_reads_them(lines: list[str]) -> None:
    text = commonmark_text(lines)
    assume(not markdown_it_misreads(text))
    assert spans(text) == commonmark_items(text)
    assert [h.start for h in markdown_doc.parse(text).headings()] == commonmark_headings(text)
    assert code(text) == commonmark_code(text)


def test_the_files_left_out_are_read_as_the_spec_reads_them() -> None:
    # A lazy line four columns in: markdown-it ends the item there, the spec does not.
    assert markdown_it_misreads("  1. a\n    ## b\n")
    assert spans("  1. a\n    ## b\n") == [(0, 2)]
    # Left out too, though markdown-it is right: two columns into "- a", past "1. b".
    text = "- a\n  1. b\n    ## c\n"
    assert markdown_it_misreads(text)
    assert spans(text) == [(0, 3)] == commonmark_items(text)


# -- through the tools --------------------------------------------------------------------------

BROKEN_MEMORY = """# MEMORY.md

## Decisions
- 2026-02-01: Chose PostgreSQL 15.
---
- 2026-02-02: Weekly syncs on Tuesday.
- - -
* 2026-02-03: Ask before deleting data.
* * *

## Ongoing
1. 2026-02-04: Migrating billing.
  - 2026-02-05: Reviewing vendor contract 49.
-   2026-02-06: Hiring a designer.

  Budget approved in February.
"""


def test_the_file_reads_as_commonmark_reads_it() -> None:
    found = entries.entries(markdown_doc.parse(BROKEN_MEMORY))
    assert [(e.start, e.end) for e in found] == commonmark_items(BROKEN_MEMORY)
    assert [e.text for e in found] == [
        "Chose PostgreSQL 15.",
        "Weekly syncs on Tuesday.",
        "Ask before deleting data.",
        "Migrating billing.",
        "Reviewing vendor contract 49.",
        "Hiring a designer.",
    ]


async def test_a_thematic_break_is_neither_counted_nor_replaced_and_stays_in_place(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, BROKEN_MEMORY)

    whole = await tools.update_long_term_memory("- 2026-03-01: all new")
    not_an_entry = await tools.record_memory("Daily syncs", replaces="- -")

    assert whole.failed and "which has 6 entries in 2 sections" in whole
    assert not_an_entry.failed and "replaces matches no entry" in not_an_entry
    assert memory(store) == (BROKEN_MEMORY, version)

    replaced = await tools.record_memory("Chose PostgreSQL 16.", replaces="Chose PostgreSQL 15")

    assert replaced == (
        "Recorded in MEMORY.md under ## Decisions and removed the entry '2026-02-01: Chose "
        f"PostgreSQL 15.' (version {version + 1})."
    )
    assert memory(store)[0] == BROKEN_MEMORY.replace(
        "- 2026-02-01: Chose PostgreSQL 15.\n---\n", "---\n"
    ).replace("* * *\n", "* * *\n- 2026-03-01: Chose PostgreSQL 16.\n")


async def test_an_entry_of_a_wide_marker_holds_the_lines_commonmark_gives_it(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, BROKEN_MEMORY)

    # Two columns in under "1. ": an entry of its own, not a line of the one above.
    again = await tools.record_memory("Reviewing vendor contract 49.", section="Ongoing")
    migrated = await tools.record_memory("Migrated billing.", replaces="Migrating billing")
    hired = await tools.record_memory("Hired a designer.", replaces="Hiring a designer")

    assert again == ("No change: MEMORY.md already has this entry under ## Ongoing (2026-02-05).")
    assert not migrated.failed and not hired.failed
    stored, now = memory(store)
    assert now == version + 2
    # Each replaced entry went alone: the line two columns in under "-   " (its text four
    # columns in) after a blank line is a paragraph of the section, and stays.
    assert stored.split("## Ongoing\n")[1] == (
        "  - 2026-02-05: Reviewing vendor contract 49.\n"
        "\n"
        "  Budget approved in February.\n"
        "- 2026-03-01: Migrated billing.\n"
        "- 2026-03-01: Hired a designer.\n"
    )
