"""The rules that read one line of a memory file, for :mod:`memstrata.agent.markdown_doc`
(its module doc states them): which block a line starts — a heading, a list item, a fence
— and how far in it stands, in columns with CommonMark's tab stops.

Inside list items a line is read with the items' columns taken off: ``base`` is the column
the text read starts at, so a tab after it still goes to the file's next tab stop.
"""

from __future__ import annotations

import re
from enum import Enum

_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r" {0,3}(#{1,6})(?=[ \t]|$)")
# An item line: its indent, marker (an ordered one's number in group 3), the blanks after it.
_ITEM = re.compile(r"( {0,3})([-*+]|([0-9]{1,9})[.)])([ \t]+|$)")
# A thematic break, which CommonMark reads before an item: "- - -" is none.
BREAK = re.compile(r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*")
# A setext underline: under a paragraph's line it ends the paragraph (a heading to
# CommonMark, text to the tools), so no lazy line goes on with it.
_UNDERLINE = re.compile(r" {0,3}(?:=+|-+)[ \t]*")
TAB = 4  # CommonMark's tab stop, for indentation in columns


class Kind(Enum):
    HEADING = "heading"
    ITEM = "item"
    TEXT = "text"


def heading(line: str) -> tuple[int, str] | None:
    """(level, title) of a heading line (read by ``markdown_doc.bare``), or None."""
    match = _HEADING.match(line)
    if match is None:
        return None
    return len(match.group(1)), title(line[match.end() :])


def title(rest: str) -> str:
    """The title in what follows a heading's opening run of "#" (one line): without the
    blanks around it and a closing run of "#" — CommonMark's, which only a blank may
    precede ("## Notes ##" is "Notes", "### ###" is empty, but "## C#" is "C#").

    String operations, each a pass over the line: the pattern this was (blanks, the
    shortest text, blanks, a closing run) read the blanks after each character of the
    title again, and a line of 16,000 blanks took 4.8 s."""
    assert "\n" not in rest  # one line
    start = len(rest) - len(rest.lstrip(" \t"))
    text = rest.rstrip(" \t")
    unclosed = text.rstrip("#")
    if len(unclosed) < len(text) and unclosed.endswith((" ", "\t")):
        text = unclosed.rstrip(" \t")
    return text[start:]


def item_text(line: str) -> str | None:
    """An item line after its marker (``- ``, ``1. ``…), or None if it starts no item."""
    match = _ITEM.match(line)
    return None if match is None or BREAK.fullmatch(line) else line[match.end() :]


def item_width(line: str) -> int:
    """The column an item line's text starts at (module doc): the lines indented so far or
    more are the item's. ``line`` starts an item."""
    return open_items(line, 0)[0][0]


def open_items(rest: str, base: int) -> tuple[list[int], str]:
    """The items ``rest`` opens one in the other (``- 1. a``; ``rest`` starts one, read
    from column ``base``): the column each one's text starts at, counted from the file's
    margin, and the rest of the line as the innermost reads it — "" for none, and after
    five blanks or more the blanks but one, as spaces (indented code), its text starting
    one column after the marker.

    As :func:`starts` reads the line after each marker, but in time linear in the line: a
    line of nested markers (``- - - … a``) must not be copied, nor matched against
    ``BREAK``, once per marker (200 KB of them took minutes)."""
    widths: list[int] = []
    end = len(rest.rstrip())  # the text after a marker is blank (``str.strip``) from here
    tails: dict[str, int] = {}  # per break character: where its closing run starts
    pos = 0
    while True:
        match = _ITEM.match(rest, pos)
        assert match is not None  # the caller, or the loop's last step, read an item here
        marker_end = match.end(2) - pos
        if match.end() >= end:
            widths.append(base + marker_end + 1)
            return widths, ""
        blanks = _advance(base + marker_end, match.group(4)) - base - marker_end
        if blanks > TAB:
            widths.append(base + marker_end + 1)
            return widths, " " * (blanks - 1) + rest[match.end() :]
        base += marker_end + blanks
        widths.append(base)
        pos = match.end()  # a character that is not blank: group 4 took the blanks
        if _ITEM.match(rest, pos) is None or _break_at(rest, pos, tails):
            return widths, rest[pos:]


def _break_at(line: str, pos: int, tails: dict[str, int]) -> bool:
    # Whether ``line[pos:]``, from a character that is not a space or tab, is a thematic
    # break (``BREAK``): one of -*_, spaces and tabs only, three of it or more. ``tails``
    # keeps, per character, where the line's last run of it, spaces and tabs starts, so
    # each test is constant time but the count, done once that run is reached.
    char = line[pos]
    if char not in "-*_":
        return False
    if char not in tails:
        tails[char] = len(line.rstrip(" \t" + char))
    return pos >= tails[char] and line.count(char, pos) >= 3


def indent(line: str, base: int = 0) -> int:
    """The column of the first character of ``line`` that is not blank, counted from
    ``base``, the column ``line`` starts at."""
    return _advance(base, line[: len(line) - len(line.lstrip(" \t"))]) - base


def _advance(column: int, blanks: str) -> int:
    # The column after ``blanks`` written from ``column`` on: a tab goes to the next stop.
    for char in blanks:
        column += TAB - column % TAB if char == "\t" else 1
    return column


def inside(line: str, width: int) -> str | None:
    """``line`` as the item whose text starts at column ``width`` reads it, those columns
    taken off and its other leading blanks written as spaces (a tab they split too); None
    unless it is indented so far."""
    # The common case, at no cost of counting columns (and no run of spaces built longer
    # than the line: a line at the margin under deep items would pay for their widths).
    if len(line) >= width and line.startswith(" " * width):
        rest = line[width:]
        if "\t" not in rest[:TAB]:
            return rest
    column = indent(line)
    return " " * (column - width) + line.lstrip(" \t") if column >= width else None


def fence_after(fence: str | None, line: str) -> str | None:
    """The fence open after ``line``, given the one open before it (None: none)."""
    match = _FENCE.match(line)
    if match is None:
        return fence
    marker = match.group(1)
    if fence is None:
        # A backtick fence's info string may not hold a backtick: "```a`b" is no fence.
        return None if marker[0] == "`" and "`" in line[match.end() :] else marker
    closes = marker[0] == fence[0] and len(marker) >= len(fence)
    # Only spaces and tabs may follow a closing fence: after a no-break space (whitespace
    # to ``str.strip``) CommonMark's fence runs on.
    return None if closes and not line[match.end() :].strip(" \t") else fence


def starts(line: str, under: bool) -> Kind:
    """The kind of block ``line`` starts; ``under``: it comes right under a line of a
    paragraph it may go on with, which an empty item or an ordered one not numbered 1
    does not interrupt (CommonMark)."""
    match = _ITEM.match(line)
    if match is not None and not BREAK.fullmatch(line):
        number = match.group(3)
        empty = not line[match.end() :].strip()
        if not under or not (empty or (number is not None and int(number) != 1)):
            return Kind.ITEM
    return Kind.HEADING if _HEADING.match(line) else Kind.TEXT


def paragraph(line: str, kind: Kind, under: bool, fresh: bool) -> bool:
    """Whether ``line`` (outside a fence, starting no item) is paragraph text, which a lazy
    line may go on with: not a heading, a thematic break, a setext underline (``under``:
    right under a paragraph's line, in its block), nor a line of indented code (four
    columns in, ``fresh``: not right after a line of a paragraph, which it would go on
    with instead)."""
    if kind is Kind.HEADING or (under and _UNDERLINE.fullmatch(line)):
        return False
    if fresh and indent(line) >= TAB:
        return False
    return BREAK.fullmatch(line) is None
