"""``file_part``: the part of a memory file MCP ``memory_read`` returns for a section or a
range of lines, as plain functions over the text (the tool itself is tested through the
SDK client in ``tests/mcp/test_memory_read_part.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from memstrata.agent.arguments import numbered_lines
from memstrata.agent.file_part import (
    INVALID_RANGE,
    INVALID_SECTION,
    SECTION_NOT_FOUND,
    SECTION_WITH_RANGE,
    START_PAST_END,
    FilePart,
    PartRefused,
    file_lines,
    file_part,
)
from memstrata.errors import ToolInputError

TEXT = "# MEMORY.md\n\n## Notes\n- a\n\n\n## Code\n```\n## not a heading\n```\n\n## notes\n- b\n"


def test_no_part_asked_is_none() -> None:
    assert file_part(TEXT, "MEMORY.md") is None


def test_lines_are_numbered_as_the_tools_number_them_without_a_last_empty_one() -> None:
    assert file_lines(TEXT) == [line for _, line in numbered_lines(TEXT)][:-1]
    assert file_lines("a\nb") == ["a", "b"]
    assert file_lines("") == [""]


def test_a_section_ends_before_its_trailing_blank_lines_and_names_its_namesakes() -> None:
    part = file_part(TEXT, "MEMORY.md", section="NOTES")
    assert part == FilePart("## Notes\n- a", 3, 4, 13, len(TEXT), "Notes", (12,))
    assert part.rest() == (
        "[Not shown: lines 1-2 and 5-13 of 13. memory_read with start_line=5 reads on; "
        "without section, start_line and line_count it reads the whole file. Another "
        "## Notes starts on line 12.]"
    )


def test_a_heading_inside_a_fence_is_no_section() -> None:
    code = file_part(TEXT, "MEMORY.md", section="Code")
    assert code is not None and code.text == "## Code\n```\n## not a heading\n```"
    with pytest.raises(ToolInputError, match="has no ## not a heading"):
        file_part(TEXT, "MEMORY.md", section="not a heading")


def test_crlf_lines_keep_their_cr_and_the_size_is_utf8_bytes() -> None:
    text = "# Ü\r\n## A\r\n- x\r\n"
    part = file_part(text, "USER.md", section="a")
    assert part == FilePart("## A\r\n- x\r", 2, 3, 3, len(text.encode()), "A")
    assert part.rest() == (
        "[Not shown: line 1 of 3. memory_read with line_count=1 reads them; without "
        "section, start_line and line_count it reads the whole file.]"
    )


def test_a_range_is_cut_at_the_end_and_all_of_it_says_nothing_more() -> None:
    part = file_part("a\nb\nc\n", "SOUL.md", start_line=2, line_count=9)
    assert part == FilePart("b\nc", 2, 3, 3, 6)
    whole = file_part("a\nb\nc\n", "SOUL.md", line_count=3)
    assert whole is not None and whole.rest() == ""


def test_a_file_without_sections_says_so() -> None:
    with pytest.raises(ToolInputError) as raised:
        file_part("just text\n", "SOUL.md", section="Tone")
    assert str(raised.value) == (
        "SOUL.md has no ## Tone, nor any other ## section; leave section out to read the "
        "whole file (1 line)"
    )


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"section": "Travel"}, SECTION_NOT_FOUND),
        ({"start_line": 14}, START_PAST_END),
        ({"start_line": 0}, INVALID_RANGE),
        ({"start_line": 2, "line_count": -1}, INVALID_RANGE),
        ({"section": "Notes", "line_count": 2}, SECTION_WITH_RANGE),
        ({"section": " ## "}, INVALID_SECTION),
    ],
)
def test_every_refusal_carries_its_code(arguments: dict[str, Any], code: str) -> None:
    # The code a client reads in MCP's structuredContent, as memory_write's refusals have.
    with pytest.raises(PartRefused) as raised:
        file_part(TEXT, "MEMORY.md", **arguments)
    assert raised.value.data == {"error": code}
    assert isinstance(raised.value, ToolInputError)  # still a bad argument to any caller


def test_a_missing_section_with_an_invisible_character_is_named_escaped() -> None:
    with pytest.raises(PartRefused) as refused:
        file_part(TEXT, "MEMORY.md", section="No\u202etes")
    assert str(refused.value).startswith("MEMORY.md has no ## No\\u202etes; did you mean")
    assert refused.value.code == SECTION_NOT_FOUND
