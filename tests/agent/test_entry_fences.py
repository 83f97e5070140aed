"""A fence opened inside an entry (on a line indented under a list item) ends with the
entry, as CommonMark ends a fenced block with the list item it is in: the first line that
is not the entry's — a heading, another item, text at the margin — is read as written.
Pinned line by line, against CommonMark's reading (markdown-it-py) over generated files,
and through the memory tools, against a real DB and sandbox: a ``## Later`` under such an
entry is found, and no fence line is added (at the margin it would open a fence)."""

from __future__ import annotations

import pytest
from hypothesis import given as for_all
from hypothesis import settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from markdown_it.token import Token

from memstrata.agent import entries, markdown_doc, sections
from memstrata.agent.markdown_doc import Kind
from memstrata.agent.prompt import build_system_prompt
from memstrata.agent.prompt_body import close_fence
from memstrata.agent.tools import MemoryTools
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.sync import SyncService
from tests.agent.md_lines import commonmark_lines, commonmark_text, with_free
from tests.agent.stored import memory, user_md
from tests.agent.tool_support import given

pytestmark = pytest.mark.anyio

# The integrator's file: a snippet pasted under an entry, its closing fence forgotten.
SNIPPET_MEMORY = """# MEMORY.md

## Decisions
- 2026-02-01: Build with:
  ```sh
  make

## Later
- 2026-02-02: Ship the importer.
"""


def tokens(text: str) -> list[Token]:
    return MarkdownIt("commonmark").parse(text)


def commonmark_headings(text: str) -> list[int]:
    """The lines of the ATX headings outside any list, as CommonMark reads ``text`` (setext
    ones are text to the tools: ``test_setext``)."""
    found = tokens(text)
    return [
        t.map[0]
        for t in found
        if t.type == "heading_open" and t.level == 0 and t.map and t.markup.startswith("#")
    ]


def commonmark_code(text: str) -> set[int]:
    """The lines of fenced code blocks that are not blank, fence lines included."""
    lines = text.split("\n")
    spans = [t.map for t in tokens(text) if t.type == "fence" and t.map]
    return {i for a, b in spans for i in range(a, b) if lines[i].strip()}


def shape(text: str) -> list[tuple[str, int, str]]:
    return [(t.type, t.level, t.content) for t in tokens(text)]


# -- the reader ---------------------------------------------------------------------------------


def test_the_heading_after_an_entry_with_an_open_fence_is_a_heading() -> None:
    doc = markdown_doc.parse(SNIPPET_MEMORY)

    assert [(b.kind, b.start, b.end) for b in doc.blocks] == [
        (Kind.HEADING, 0, 1),
        (Kind.HEADING, 2, 3),
        (Kind.ITEM, 3, 6),  # the entry, its code inside
        (Kind.HEADING, 7, 8),
        (Kind.ITEM, 8, 9),
    ]
    assert doc.code == {4, 5}
    assert doc.open_fence is None and doc.entry_fence is None
    assert sections.section_titles(doc) == ["Decisions", "Later"]
    assert markdown_doc.unclosed_fence(doc.lines) is None
    assert commonmark_headings(SNIPPET_MEMORY) == [0, 2, 7]
    assert commonmark_code(SNIPPET_MEMORY) == doc.code


@pytest.mark.parametrize(
    ("text", "code", "items"),
    [
        # Blank lines inside go on with the entry when an indented line follows.
        ("- a\n  ```\n  x\n\n  y\n\nafter", {1, 2, 3, 4}, [(0, 5)]),
        # A line at the margin ends the entry: fenced code is no paragraph to go on with.
        ("- a\n  ```\n  x\nafter\n## h", {1, 2}, [(0, 3)]),
        # A fence at the margin after it ends the entry and opens a fence of its own.
        ("- a\n  ```\n  x\n```\n## h", {1, 2, 3, 4}, [(0, 3)]),
        # Another item ends the entry; the fence closes inside it otherwise.
        ("- a\n  ~~~\n  ```\n  ~~~\n- b", {1, 2, 3}, [(0, 4), (4, 5)]),
        # One space in is not inside the item: a fence of its own, to the end.
        ("- a\n ```\nx\n## h", {1, 2, 3}, [(0, 1)]),
        # A code line at the margin ends the entry; the "closing" line opens a fence.
        ("- a\n  ```\nx\n  ```\n- b", {1, 3, 4}, [(0, 2)]),
    ],
)
def test_a_fence_in_an_entry_is_code_while_the_entry_goes_on(
    text: str, code: set[int], items: list[tuple[int, int]]
) -> None:
    doc = markdown_doc.parse(text)
    assert doc.code == code
    assert {i for i in code if doc.bare(i).strip()} == commonmark_code(text)
    assert [(b.start, b.end) for b in doc.blocks if b.kind is Kind.ITEM] == items


def test_a_fence_open_in_the_last_entry_is_not_left_open() -> None:
    doc = markdown_doc.parse("## A\n- a\n  ```py\n  x\n\n")
    assert doc.open_fence is None
    assert doc.entry_fence == (2, "```")
    assert [(b.start, b.end) for b in doc.blocks] == [(0, 1), (1, 4)]  # not the blank lines
    assert markdown_doc.unclosed_fence(doc.lines) is None
    # The lines the tools add after it end the entry, so they need no closing line.
    assert sections.append_to_section("\n".join(doc.lines), "A", "- b") == (
        "## A\n- a\n  ```py\n  x\n- b\n\n"
    )
    assert sections.set_key("\n".join(doc.lines), "B", "k", "v") == (
        "## A\n- a\n  ```py\n  x\n\n## B\n- k: v\n"
    )


def test_the_prompt_closes_an_entry_fence_inside_the_entry() -> None:
    # A margin fence would end the entry and open a fence: the marker would be code.
    assert close_fence("- a\n   ````sh\n   x") == "- a\n   ````sh\n   x\n   ````"
    assert close_fence("- a\n  ```\n  x\n  ```") == "- a\n  ```\n  x\n  ```"
    assert close_fence("- a\n```\nx") == "- a\n```\nx\n```"
    result = build_system_prompt(
        agents_md="",
        soul="",
        user="",
        memory="## A\n- a\n  ```\n  x",
        token_limit=100_000,
        count=lambda text: len(text.split()),
    )
    body = result.text.split('<file name="MEMORY.md">\n', 1)[1]
    assert body == "## A\n- a\n  ```\n  x\n  ```\n</file>"
    assert commonmark_code(body) == {2, 3, 4}


@pytest.mark.parametrize("after", ["\u00a0", "\u3000", " \u00a0", "\x0b"])
def test_a_fence_closes_only_with_spaces_or_tabs_after_it(after: str) -> None:
    # Found by Hypothesis (free-form lines, ``md_lines``). CommonMark closes a fence only
    # with spaces or tabs after it: after a no-break or ideographic space (whitespace to
    # ``str.strip``) the fence runs on, and the heading below is code. The reader closed it
    # there: the tools found a section CommonMark reads as code, and the prompt added no
    # closing line, so its marker and close tag read as code.
    text = f"## A\n```\nx\n```{after}\n## Notes\n- a"
    doc = markdown_doc.parse(text)
    assert commonmark_headings(text) == [0] and commonmark_code(text) == {1, 2, 3, 4, 5}
    assert [h.start for h in doc.headings()] == [0]
    assert {i for i in doc.code if doc.bare(i).strip()} == {1, 2, 3, 4, 5}
    assert doc.open_fence == "```" and close_fence(text) == f"{text}\n```"
    # Spaces and tabs after it close it.
    assert markdown_doc.parse(text.replace(after, " \t")).open_fence is None


def test_entries_end_where_their_fence_does() -> None:
    text = "## A\n- 2026-03-01: run\n  ```\n  make\nlater text\n- 2026-03-02: b\n"
    found = entries.entries(markdown_doc.parse(text))
    assert [(e.start, e.end, e.text) for e in found] == [(1, 4, "run ``` make"), (5, 6, "b")]


# -- against CommonMark -------------------------------------------------------------------------

# Lines whose reading the reader and CommonMark share: "- " items (their text two columns
# in, as the reader counts), lines two or three spaces in, fences of both kinds at the
# margin and inside items, headings at the margin and inside items, text at the margin or
# one space in (a lazy line of an item's paragraph, or of none after its code).
_LINE = st.sampled_from(
    [
        "## Notes",
        "# MEMORY",
        "- 2026-03-01: tea",
        "* b",
        "  more",
        "   more",
        "  ## nested",
        "  - nested",
        " lazy, one space in",
        "text",
        "```",
        "~~~",
        "````",
        "```py",
        "  ```",
        "  ~~~",
        "  ```sh",
        "   ```",
        "  ````",
        "",
        "",
    ]
)


# And free-form lines (``md_lines``), without a ">": ``commonmark_code`` counts a fence in
# a block quote, which is no code of the file's (test_quote_html_blocks reads quotes).
@settings(max_examples=1000, deadline=None)
@for_all(st.lists(with_free(_LINE, commonmark_lines(without=">")), max_size=25))
def test_code_and_headings_read_as_commonmark_reads_them(lines: list[str]) -> None:
    text = commonmark_text(lines)
    doc = markdown_doc.parse(text)
    headings = [h.start for h in doc.headings()]
    assert headings == commonmark_headings(text)
    assert {i for i in doc.code if doc.bare(i).strip()} == commonmark_code(text)


# -- through the tools --------------------------------------------------------------------------


async def test_record_memory_finds_the_section_after_an_entry_with_an_open_fence(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, SNIPPET_MEMORY)

    answer = await tools.record_memory("Review the importer", section="Later")

    assert answer == f"Recorded in MEMORY.md under ## Later (version {version + 1})."
    stored = memory(store)[0]
    new = "- 2026-03-01: Review the importer\n"
    assert stored == SNIPPET_MEMORY + new  # no fence line, no second ## Later
    assert sections.section_titles(markdown_doc.parse(stored)) == ["Decisions", "Later"]
    # To CommonMark the file reads as before, with one more item in the last list.
    before, after = shape(SNIPPET_MEMORY), shape(stored)
    item = [t for t in shape(new) if t[0] not in ("bullet_list_open", "bullet_list_close")]
    assert after[: len(before) - 1] + after[len(before) - 1 + len(item) :] == before
    assert after[len(before) - 1 : len(before) - 1 + len(item)] == item
    assert commonmark_headings(stored) == commonmark_headings(SNIPPET_MEMORY)
    # The next call sees that entry under ## Later.
    answer = await tools.record_memory("Review the importer", section="Later")
    assert answer == "No change: MEMORY.md already has this entry under ## Later (2026-03-01)."


async def test_the_entry_and_section_of_an_entry_fence_can_be_replaced(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, SNIPPET_MEMORY)

    replaced = await tools.record_memory("Build with make", replaces="Build with:")

    assert replaced == (
        f"Recorded in MEMORY.md under ## Decisions and removed the entry '2026-02-01: Build "
        f"with: ```sh make' (3 lines) (version {version + 1})."
    )
    assert memory(store)[0] == SNIPPET_MEMORY.replace(
        "- 2026-02-01: Build with:\n  ```sh\n  make\n", "- 2026-03-01: Build with make\n"
    )
    await given(sync, FileKind.MEMORY, SNIPPET_MEMORY)
    answer = await tools.update_long_term_memory(
        "- 2026-03-01: make", section="Decisions", replace_section=True
    )
    assert not answer.failed
    assert memory(store)[0].endswith(
        "## Decisions\n- 2026-03-01: make\n\n## Later\n- 2026-02-02: Ship the importer.\n"
    )


async def test_an_entry_whose_code_ends_with_it_is_recorded(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, SNIPPET_MEMORY)

    answer = await tools.record_memory("Deploy with:\n\n    ```\n    make deploy", "Decisions")
    later = await tools.record_memory("Ship the exporter", section="Later")

    assert answer == f"Recorded in MEMORY.md under ## Decisions (version {version + 1})."
    assert later == f"Recorded in MEMORY.md under ## Later (version {version + 2})."
    stored = memory(store)[0]
    assert "  make\n- 2026-03-01: Deploy with:\n  ```\n  make deploy\n\n## Later\n" in stored
    assert sections.section_titles(markdown_doc.parse(stored)) == ["Decisions", "Later"]
    assert commonmark_headings(stored) == [0, 2, 10]


async def test_update_user_adds_no_fence_line_after_an_entry_fence(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    text = "# USER.md\n\n## Profile\n- Signature:\n  ~~~\n  Ann, Berlin\n"
    await given(sync, FileKind.USER, text)

    answer = await tools.update_user("Berlin", section="Work", key="City")

    assert not answer.failed and "fence" not in answer
    assert user_md(store)[0] == text + "\n## Work\n- City: Berlin\n"
    assert commonmark_headings(user_md(store)[0]) == [0, 2, 7]
