"""The tools and the prompt's cut read a memory file alike: where their readings used to
differ, the one reading follows CommonMark. Each case here was read one way by the tools
(``agent.sections``, ``agent.entries``) and another by the cut (``agent.prompt_body``), or
one way by the section edits and another by the entries."""

from __future__ import annotations

import re
from datetime import date

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstrata.agent import entries, sections
from memstrata.agent.edits import NothingToWrite, ReplaceSection
from memstrata.agent.markdown_doc import bare, parse
from memstrata.agent.prompt_body import memory_entries
from memstrata.agent.record_edit import AppendEntry
from memstrata.memory.kinds import FileKind
from tests.agent.md_lines import with_free

DAY = date(2026, 3, 9)
_LEVEL_2 = re.compile(r" {0,3}##(?:[ \t]|$)")


def spans(text: str) -> list[tuple[int, int]]:
    return [(e.start, e.end) for e in entries.entries(parse(text))]


def pieces(text: str) -> list[tuple[tuple[str, ...], bool]]:
    return [(p.lines, p.entry) for p in memory_entries(text)]


@pytest.mark.parametrize(
    "code",
    [
        "```\n~~~\n## Notes\n- 2026-01-01: in code\n```",  # ~~~ does not close ```
        "````\n```\n## Notes\n- 2026-01-01: in code\n````",  # nor does a shorter fence
        "```py\n```js\n## Notes\n- 2026-01-01: in code\n```",  # nor one with an info string
    ],
)
def test_a_heading_in_fenced_code_is_no_section_and_a_bullet_no_entry(code: str) -> None:
    text = f"## Log\n{code}\n"
    assert sections.find_section(parse(text), "Notes") is None
    assert spans(text) == []
    # The edit adds a section after the code instead of writing into it.
    assert sections.append_to_section(text, "Notes", "- b") == f"{text}\n## Notes\n- b\n"
    assert pieces(text)[1] == ((*code.split("\n"), ""), True)  # the cut keeps it whole


def test_a_tab_indented_fence_line_is_indented_code_not_a_fence() -> None:
    text = "## Log\n\t```\n## Notes\n- 2026-01-01: tea"
    assert sections.find_section(parse(text), "Notes") is not None
    assert spans(text) == [(3, 4)]


@pytest.mark.parametrize(("heading", "title"), [("   ## Decisions", "Decisions"), ("##", "")])
def test_an_indented_or_empty_heading_ends_a_section(heading: str, title: str) -> None:
    # (Right under an entry, a line two or more spaces in is part of that entry.)
    text = f"## Notes\nText.\n{heading}\n- b\n"
    assert sections.append_to_section(text, "Notes", "- c") == text.replace("t.\n", "t.\n- c\n")
    assert [e.section for e in entries.entries(parse(text))] == [title]


def test_a_heading_indented_under_an_entry_is_part_of_it() -> None:
    text = "## A\n- a\n  ## a note\n- b"
    assert spans(text) == [(1, 3), (3, 4)]
    assert sections.find_section(parse(text), "a note") is None
    assert pieces(text) == [
        (("## A",), False),
        (("- a", "  ## a note"), True),
        (("- b",), True),
    ]


def test_a_line_one_space_in_under_an_entry_is_its_own_item_or_heading() -> None:
    text = "- a\n - b\n ## Notes\n- c"
    assert spans(text) == [(0, 1), (1, 2), (3, 4)]
    assert sections.find_section(parse(text), "Notes") is not None


def test_list_items_of_every_kind_are_entries() -> None:
    found = entries.entries(parse("1. 2026-01-01: tea\n2) coffee\n-\n - juice"))
    assert [(e.start, e.end, e.date, e.text) for e in found] == [
        (0, 1, "2026-01-01", "tea"),
        (1, 2, None, "coffee"),
        (2, 3, None, ""),
        (3, 4, None, "juice"),
    ]
    assert entries.comparable("1. 2026-01-01: TEA") == "tea"


MEMORY = """## Preferences
- 2026-03-01: Prefers tea
over coffee.

  Since March.
- 2026-03-02: Config:
  ```
  cache = off
  ```
- 2026-03-03: last
"""


def test_an_entry_holds_its_paragraph_and_what_is_indented_under_it() -> None:
    found = entries.entries(parse(MEMORY))
    assert [(e.start, e.end, e.text) for e in found] == [
        (1, 5, "Prefers tea over coffee. Since March."),
        (5, 9, "Config: ``` cache = off ```"),  # the fence inside it
        (9, 10, "last"),
    ]
    edit = AppendEntry("Prefers green tea", None, DAY, replaces="prefers tea over coffee")
    assert edit(MEMORY) == MEMORY.replace(
        "- 2026-03-01: Prefers tea\nover coffee.\n\n  Since March.\n", ""
    ).replace("last\n", "last\n- 2026-03-09: Prefers green tea\n")
    # After a blank line, a line one space in is a paragraph of its own (CommonMark).
    assert pieces("- a\n\n b") == [(("- a",), True), (("", " b"), True)]


@pytest.mark.parametrize("first", ["- 2026-01-01: tea", "```"])
def test_a_byte_order_mark_hides_no_entry_or_fence(first: str) -> None:
    text = f"\ufeff{first}\n## Notes\n- 2026-01-02: in code?\n```\n"
    in_code = first == "```"
    assert [e.start for e in entries.entries(parse(text))] == ([] if in_code else [0, 2])
    assert (sections.find_section(parse(text), "Notes") is None) is in_code


def test_a_key_in_fenced_code_is_an_example_not_a_fact() -> None:
    text = "## Profile\n```\n- Name: example\n```\n"
    assert sections.set_key(text, "Profile", "Name", "Ann") == text + "- Name: Ann\n"
    assert sections.body_keys("```\n- Name: example\n```\n- Role: dev") == ["Role"]


def test_the_keys_of_a_body_are_its_lines_as_the_file_will_hold_them() -> None:
    # U+2028 is no line break to the tools: in the file, Email would be part of Name's line.
    body = "- Name: Ann\u2028- Email: ann@example.com"
    assert sections.body_keys(body) == ["Name"]
    text = "## Profile\n- Name: Ann\n- Email: ann@example.com\n"
    with pytest.raises(
        NothingToWrite, match=r"would remove 1 of its 2 entries \('Email: ann@example.com'\)"
    ):
        ReplaceSection(FileKind.USER, "Profile", body, guard=True)(text)


def test_an_answer_names_a_crlf_section_as_the_file_spells_it() -> None:
    edit = AppendEntry("tea", "notes", DAY, None)
    edit("# M\r\n\r\n## Notes\r\n- a\r\n")
    assert edit.done == "Recorded in MEMORY.md under ## Notes"
    replace = ReplaceSection(FileKind.MEMORY, "C#", "- y")
    text = "## Log\r\n- a\r\n\r\n## C# ##\r\n- x\r\n"
    assert replace(text) == "## Log\r\n- a\r\n\r\n## C# ##\r\n- y\r\n"
    assert (replace.done, replace.notes) == (
        "Replaced ## C# in MEMORY.md",
        ["Removed 1 entry ('x')."],
    )


# With lists nested in entries, their fences and headings, and fences on items' lines; and
# free-form lines (``md_lines``): the two readings are one parse, so any line will do.
_LINE = st.sampled_from(
    ["# M", "## Notes", "   ## Indented", "##", "### Sub", "- 2026-03-01: a", " - b", "1. c",
     "  more", " one in", "  ## nested", "lazy", "```", "~~~", "````", "\t```", "", "",
     "x\u2028## y", "  - nested", "  1. nested", "    ```", "     ~~~", "    ## deeper",
     "- ```py", "  - ```", "- - a"]
)  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(st.lists(with_free(_LINE), max_size=25))
def test_the_tools_and_the_cut_see_the_same_sections_and_entries(lines: list[str]) -> None:
    text = "\n".join(lines)
    doc = parse(text)
    starts: list[int] = []  # the first non-blank line of each piece the cut reads
    level_2: list[int] = []
    at = 0
    for piece in memory_entries(text):
        # Each line as the rules read it: a mark that starts the text is no part of it.
        lines = [bare(line, at + i) for i, line in enumerate(piece.lines)]
        own = next(i for i, line in enumerate(lines) if line.strip() or i == len(lines) - 1)
        if lines[own].strip():
            starts.append(at + own)
            if not piece.entry and _LEVEL_2.match(lines[own]):
                level_2.append(at + own)
        at += len(piece.lines)
    found = {
        s.heading for t in sections.section_titles(doc) for s in sections.find_sections(doc, t)
    }
    assert found == set(level_2)
    assert {e.start for e in entries.entries(doc)} <= set(starts)


def test_a_hash_that_ends_a_title_is_part_of_it() -> None:
    """CommonMark closes a heading with a run of "#" only after a blank: "## C#" is C#, and
    it used to be read as "C", so replacing section "C" replaced the C# notes."""
    text = "## C#\n- pointers? no\n\n## C\n- pointers\n"
    assert [s.title for s in parse(text).sections()] == ["C#", "C"]
    replace = ReplaceSection(FileKind.MEMORY, "C", "- malloc")
    assert replace(text) == "## C#\n- pointers? no\n\n## C\n- malloc\n"
    replace = ReplaceSection(FileKind.MEMORY, "## C# ##", "- LINQ")
    assert replace(text) == "## C#\n- LINQ\n\n## C\n- pointers\n"
