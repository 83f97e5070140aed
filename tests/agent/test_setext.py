"""Setext headings (``Title`` over a line of ``===`` or ``---``) are read as text by the
tools' reader (``agent.markdown_doc``), on purpose: CommonMark reads them as headings, but
``---`` is also a YAML frontmatter delimiter (a template pasted back whole) and a separator
an agent writes under a paragraph, and as a heading it would end a section there. Pinned
here line by line, against CommonMark's reading (markdown-it-py), and through the tools."""

from __future__ import annotations

import pytest
from hypothesis import given as for_all
from hypothesis import settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt  # CommonMark, installed with typer (its rich)

from memstrata.agent import markdown_doc, sections
from memstrata.agent.markdown_doc import Kind
from memstrata.agent.tools import MemoryTools
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import default_template_dir
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory
from tests.agent.test_markdown_doc import documents
from tests.agent.tool_support import FULL_MEMORY, given

pytestmark = pytest.mark.anyio

# Lines CommonMark takes for a setext underline under a paragraph: "=" or "-" runs, up to
# three spaces in, trailing blanks allowed ("-" alone, text under a paragraph and an item
# elsewhere, is left out).
UNDERLINES = ["===", "=", "---", "  ---", "----- \t", "   ======"]


def commonmark_headings(text: str) -> list[tuple[str, str]]:
    tokens = MarkdownIt("commonmark").parse(text)
    return [
        (token.tag, tokens[index + 1].content)
        for index, token in enumerate(tokens)
        if token.type == "heading_open" and token.level == 0
    ]


@pytest.mark.parametrize("underline", UNDERLINES)
def test_a_setext_underline_is_text_to_the_tools_and_a_heading_to_commonmark(
    underline: str,
) -> None:
    text = f"## Decisions\n- 2026-03-01: PG 15\n\nBilling\n{underline}\n- 2026-03-02: syncs\n"
    doc = markdown_doc.parse(text)

    level = "h1" if "=" in underline else "h2"
    assert commonmark_headings(text) == [("h2", "Decisions"), (level, "Billing")]
    assert [(b.kind, b.start, b.end) for b in doc.blocks] == [
        (Kind.HEADING, 0, 1),
        (Kind.ITEM, 1, 2),
        (Kind.TEXT, 3, 5),  # the paragraph, its underline included
        (Kind.ITEM, 5, 6),
    ]
    assert [(s.title, s.end) for s in doc.sections()] == [("Decisions", 7)]


def test_template_frontmatter_pasted_back_is_no_section() -> None:
    raw = (default_template_dir() / "MEMORY.md").read_text()
    assert raw.startswith("---\n")
    # CommonMark: a thematic break, then the YAML lines as one level-2 setext heading.
    assert commonmark_headings(raw)[0][0] == "h2"
    doc = markdown_doc.parse(raw)
    assert sections.section_titles(doc) == ["Decisions", "Ongoing", "Lessons"]
    assert doc.blocks[0].kind is Kind.TEXT and doc.blocks[0].end == 5


# And underlines of any length, indent and trailing blanks ("-" alone, or with blanks after
# it, is an item's line: left out).
_UNDERLINE = st.one_of(
    st.sampled_from(UNDERLINES),
    st.tuples(
        st.sampled_from(["", " ", "  ", "   "]),
        st.sampled_from(["=", "-"]),
        st.integers(1, 8),
        st.sampled_from(["", " ", "\t", " \t "]),
    )
    .filter(lambda drawn: drawn[1] == "=" or drawn[2] > 1)
    .map(lambda drawn: drawn[0] + drawn[1] * drawn[2] + drawn[3]),
)


@settings(max_examples=300, deadline=None)
@for_all(documents(), st.lists(st.tuples(st.integers(0, 30), _UNDERLINE), max_size=5))
def test_an_underline_reads_as_any_line_of_text(text: str, inserted: list[tuple[int, str]]) -> None:
    """Underlines anywhere in a document change nothing a line of text as far in would
    not: the same blocks (so headings and sections), code and open fence. A "-" one is a
    thematic break where it is no underline (after an entry, it ends the entry), so it
    reads as the break of "*" would: as text under a paragraph outside the entries.

    Each is followed by a blank line in both documents: an underline ends its paragraph
    (CommonMark's setext heading), so the line after it is no lazy line of the entry, where
    it would be after a line of text (``- tea`` / ``   ===`` / ``more``: ``more`` is text
    of its own, as CommonMark reads it)."""
    # Placed before lines of the document itself, never between an inserted underline and
    # its blank line: there a second underline would be the line after the first.
    original = text.split("\n")
    before: dict[int, list[str]] = {}
    for at, underline in inserted:
        before.setdefault(min(at, len(original)), []).append(underline)
    lines: list[str] = []
    plain: list[str] = []
    for i in range(len(original) + 1):
        for underline in before.get(i, []):
            lines += [underline, ""]
            # The same line with letters for its "=" (text, as far in), "*" for its "-".
            plain += [underline.replace("=", "x").replace("-", "*"), ""]
        lines += original[i : i + 1]
        plain += original[i : i + 1]
    doc, other = markdown_doc.parse("\n".join(lines)), markdown_doc.parse("\n".join(plain))
    assert doc.blocks == other.blocks
    assert doc.code == other.code and doc.open_fence == other.open_fence


async def test_the_tools_keep_a_section_whole_over_a_paragraph_and_its_underline(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, FULL_MEMORY)
    body = "We moved billing to PG 15.\n---\n- 2026-02-01: Chose PostgreSQL 15 for billing."

    # Not refused as a heading in a body: to the tools it is none.
    replaced = await tools.update_long_term_memory(body, section="Decisions", replace_section=True)
    recorded = await tools.record_memory("Weekly syncs on Tuesday", section="Decisions")

    # The entries it replaced are listed (agent.removals).
    assert replaced.startswith(
        f"Replaced ## Decisions in MEMORY.md (version {version + 1}). Removed "
    )
    assert recorded == f"Recorded in MEMORY.md under ## Decisions (version {version + 2})."
    stored = memory(store)[0]
    assert f"## Decisions\n{body}\n- 2026-03-01: Weekly syncs on Tuesday\n\n## Ongoing" in stored
    assert sections.section_titles(markdown_doc.parse(stored)) == [
        "Decisions",
        "Ongoing",
        "Lessons",
    ]
    # CommonMark would make the paragraph a section, and the entries under it its own.
    assert ("h2", "We moved billing to PG 15.") in commonmark_headings(stored)
