"""The one reading of a memory file's structure (``agent.markdown_doc``): its rules line by
line, and over generated documents its invariants — blocks cover every line that is not
blank, the parts join back to the text byte for byte, line breaks and a byte-order mark
change nothing, nothing in fenced code is a heading or an entry, a fence in an entry ends
with it."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memstrata.agent.markdown_doc import (
    BOM,
    Doc,
    Kind,
    fence_after,
    heading,
    indent,
    item_text,
    item_width,
    open_fence,
    parse,
    unclosed_fence,
)
from memstrata.agent.markdown_lines import open_items
from tests.agent.md_lines import with_free

# Lines that exercise every rule: headings of levels 1-3 (indented, empty, closing #s, a
# level-7 non-heading), items of every width with continuation lines at each indentation,
# a thematic break, fences of both kinds and lengths with headings and bullets inside,
# blank lines, U+2028 and a lone CR.
_LINE = st.sampled_from(
    [
        "# MEMORY",
        "## Notes",
        "## Notes ##",
        "   ## Decisions",
        "##",
        "### Sub",
        "####### x",
        "- 2026-03-01: tea",
        "* b",
        " - c",
        "1. d",
        "10) e",  # wider markers: their lines are those as far in as their text
        "-   f",
        "- - -",  # a thematic break, no item
        "- Name: Ann",
        "  more",
        "\tmore",
        " more",
        "  - nested",
        "  ## nested",
        "lazy text",
        "```",
        "~~~",
        "````",
        "```py",
        "  ```",
        "\t```",
        "",
        "",
        "  ",
        "x\u2028## not a line of its own",
        "a\rb",
        "---",  # setext underlines: text to these rules (tests/agent/test_setext.py)
        "===",
    ]
)


# And free-form lines (``md_lines``): the invariants hold for any line.
_ANY_LINE = with_free(_LINE)


@st.composite
def documents(draw: st.DrawFn) -> str:
    text = "\n".join(draw(st.lists(_ANY_LINE, max_size=30)))
    if draw(st.booleans()):
        text += "\n"
    return text


def blank(line: str) -> bool:
    return not line.strip()


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("## Notes", (2, "Notes")),
        ("   ### Notes ###", (3, "Notes")),  # up to three spaces in; a closing run goes
        ("## C#", (2, "C#")),  # a closing run follows a blank; this "#" is the title's
        ("## Notes#", (2, "Notes#")),
        ("## F# and C# ##", (2, "F# and C#")),
        ("### ###", (3, "")),
        ("## #", (2, "")),
        ("##\t#\t", (2, "")),
        ("##", (2, "")),
        ("## ", (2, "")),
        ("    ## code", None),  # four spaces: indented code
        ("##Notes", None),
        ("####### seven", None),
        ("#hashtag", None),
    ],
)
def test_heading(line: str, expected: tuple[int, str] | None) -> None:
    assert heading(line) == expected


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("- a", "a"),
        ("*\tb", "b"),
        (" + c", "c"),
        ("12. d", "d"),
        ("3) e", "e"),
        ("-", ""),
        ("   - three spaces in", "three spaces in"),  # an item after a heading or text
        ("    - code", None),  # four spaces: indented code
        ("- - -", None),  # a thematic break
        ("* * *", None),
        ("-x", None),
        ("2026-03-01: not an item", None),
    ],
)
def test_item_text(line: str, expected: str | None) -> None:
    assert item_text(line) == expected


def test_fence_after() -> None:
    assert fence_after(None, "```py") == "```"
    assert fence_after(None, "```a`b") is None  # a backtick in a backtick fence's info
    assert fence_after(None, "\t```") is None  # a tab is four columns: indented code
    assert fence_after("````", "```") == "````"  # shorter: no close
    assert fence_after("```", "~~~") == "```"  # the other character: no close
    assert fence_after("```", "``` x") == "```"  # a closing fence has no info string
    assert fence_after("```", "   ````") is None


def kinds(text: str) -> list[tuple[str, int, int]]:
    return [(b.kind.value, b.start, b.end) for b in parse(text).blocks]


def test_blocks_of_a_memory_file() -> None:
    text = "\n".join(
        [
            "\ufeff# MEMORY",  # 0
            "",
            "Intro text",  # 2
            "  indented: the same paragraph",
            "## Notes",  # 4
            "- 2026-03-01: tea",  # 5
            "  more",
            "lazy: the same paragraph",
            "",
            "  after a blank, indented: still the entry",
            "```",  # 10: a fence at the margin ends the entry
            "## fenced",
            "```",
            " - a sibling item",  # 13
            "   ## a heading inside the item (three columns in, where its text starts)",
            " ## Decisions",  # 15
        ]
    )
    assert kinds(text) == [
        ("heading", 0, 1),
        ("text", 2, 4),
        ("heading", 4, 5),
        ("item", 5, 10),
        ("text", 10, 13),
        ("item", 13, 15),
        ("heading", 15, 16),
    ]
    doc = parse(text)
    assert doc.code == {10, 11, 12}
    assert [(s.heading, s.end, s.title) for s in doc.sections()] == [
        (4, 15, "Notes"),
        (15, 16, "Decisions"),
    ]


def parts(doc: Doc) -> list[tuple[int, int]]:
    """The document as consecutive spans: each block, and the blank lines between."""
    spans: list[tuple[int, int]] = []
    at = 0
    for block in doc.blocks:
        if block.start > at:
            spans.append((at, block.start))
        spans.append((block.start, block.end))
        at = block.end
    if at < len(doc.lines):
        spans.append((at, len(doc.lines)))
    return spans


@settings(max_examples=500, deadline=None)
@given(documents())
def test_blocks_cover_the_text_and_join_back_to_it(text: str) -> None:
    doc = parse(text)
    assert len(doc.lines) == text.count("\n") + 1  # U+2028 and a lone CR split nothing
    spans = parts(doc)
    assert "\n".join("\n".join(doc.lines[a:b]) for a, b in spans) == text
    assert [a for a, _ in spans[1:]] == [b for _, b in spans[:-1]]  # consecutive, no overlap
    blocks = {(b.start, b.end) for b in doc.blocks}
    for start, end in spans:
        if (start, end) in blocks:
            assert not blank(doc.bare(start))
            assert (end == len(doc.lines) and doc.open_fence) or not blank(doc.bare(end - 1))
        else:
            assert all(blank(doc.bare(i)) for i in range(start, end))


@settings(max_examples=500, deadline=None)
@given(documents())
def test_nothing_in_fenced_code_is_a_heading_or_an_entry(text: str) -> None:
    doc = parse(text)
    for block in doc.blocks:
        if block.start in doc.code:  # only a block that a fence opens
            line = doc.bare(block.start)
            # An entry's own line is code when a fence follows its markers (``- ```sh``).
            if block.kind is Kind.ITEM:
                line = open_items(line, 0)[1]
            else:
                assert block.kind is Kind.TEXT
            assert fence_after(None, line) is not None
    for section in doc.sections():
        assert section.heading not in doc.code
        assert heading(doc.bare(section.heading)) == (2, section.title)


@settings(max_examples=500, deadline=None)
@given(documents())
def test_sections_run_to_the_next_heading_of_level_one_or_two(text: str) -> None:
    doc = parse(text)
    tops = [h.start for h in doc.headings() if h.level <= 2]
    for section in doc.sections():
        later = [i for i in tops if i > section.heading]
        assert section.end == (later[0] if later else len(doc.lines))


@settings(max_examples=500, deadline=None)
@given(documents(), st.booleans())
def test_crlf_and_a_byte_order_mark_read_the_same(text: str, bom: bool) -> None:
    # Not for a free-form line that ends in a CR: its twin ends in CR CR LF, whose first CR
    # is text (only the CR of a CR LF is part of the line break). Nor a mark before a text
    # that starts with one: the second mark is text.
    assume("\r\n" not in text and not (bom and text.startswith(BOM)))
    doc = parse(text)
    other = parse((BOM if bom else "") + text.replace("\n", "\r\n"))
    assert other.blocks == doc.blocks
    assert other.code == doc.code
    assert other.open_fence == doc.open_fence == open_fence(text)


@settings(max_examples=500, deadline=None)
@given(documents())
def test_an_unclosed_fence_holds_every_line_from_its_opening_to_the_end(text: str) -> None:
    doc = parse(text)
    found = unclosed_fence(doc.lines)
    assert (found is None) == (doc.open_fence is None)
    if found is not None:
        opening, fence = found
        assert fence == doc.open_fence
        assert set(range(opening, len(doc.lines))) <= doc.code
        assert fence_after(None, doc.bare(opening)) == fence
        last = doc.blocks[-1]
        assert last.kind is Kind.TEXT  # in an entry, the end of the entry would end it
        assert last.start <= opening and last.end == len(doc.lines)


@settings(max_examples=500, deadline=None)
@given(documents())
def test_a_fence_in_an_entry_ends_with_the_entry(text: str) -> None:
    """An entry's code is indented under it, as far as its text starts: a line less
    indented ends the entry and its fence (blank lines between are the entry's), and the
    end of the file leaves no fence of an entry open."""
    doc = parse(text)
    for block in doc.blocks:
        if block.kind is Kind.ITEM:
            width = item_width(doc.bare(block.start))
            # (The entry's own line is code when it opens a fence after its marker.)
            inside = [i for i in range(block.start + 1, block.end) if i in doc.code]
            assert all(indent(doc.bare(i)) >= width for i in inside if doc.bare(i).strip())
    if doc.entry_fence is not None:
        assert doc.open_fence is None and doc.blocks[-1].kind is Kind.ITEM
        assert doc.entry_fence[0] in doc.code
