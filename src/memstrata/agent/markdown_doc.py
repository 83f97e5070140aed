"""The structure of a memory file, read in one place: which lines are headings, entries,
other text and fenced code. The tools' sections and entries (``agent.sections``,
``agent.entries``) and the prompt's cut of MEMORY.md (``agent.prompt_body``) are all built
on :func:`parse`, so a line the tools take for a heading is a heading to the cut too.

Lines are the text split at LF, as the edit functions split it: a CR before the LF is part
of the line break (a CR LF file reads as its LF twin), and any other character — a lone
CR, U+2028, U+0085 — is text inside its line. A byte-order mark before the first line is
no part of it. Blank means whitespace only (``str.strip``).

Markdown is read as CommonMark reads it, as far as these rules need:

* a *fence* is three or more backticks or tildes after at most three spaces, closed by a
  line of the same character at least as long with nothing after it; a backtick fence's
  info string holds no backtick. Inside a fence nothing is a heading or an entry. A fence
  opened in an entry (on a line indented under it) ends with the entry if not before: its
  lines are code while they are the entry's — blank, or indented by its width or more —
  and the first line that is not (a heading, an item, a fence, text, less indented) ends
  both, and is read as written; it does not go on with the entry, since code is no
  paragraph. Any other fence left open runs to the end of the file.
* a *heading* is one to six ``#`` after at most three spaces, then a space, a tab or the
  line's end (setext headings are not read); its title is the text after the ``#`` run,
  without surrounding blanks and the ``#`` characters that end the line.
* an *item* — an entry — is a top-level list item: ``-``, ``*``, ``+``, or one to nine
  digits and ``.`` or ``)``, after at most three spaces, then a space, a tab or the line's
  end; not a thematic break (``---``, ``* * *``, ``___``: three or more of one of ``-*_``,
  blanks between, after at most three spaces), which CommonMark reads first. After a
  paragraph outside any item, an empty item and an ordered one not numbered 1 start none:
  CommonMark reads them as paragraph text (``-`` alone as a setext underline, text here).
  An item's *width* is the column its text starts at: the marker's end plus the blanks
  after it (one to four columns; five or more, and none, count as one, the rest of such a
  line being code). Its lines are the item line, every later line indented by its width or
  more (a nested list, a heading or a fence inside the item; after blank lines too, except
  under an empty item line, which a blank line ends), and the lines of its paragraph: any
  line that is not blank and starts no item, heading, fence or thematic break, after a
  line of text of the item (not after a blank line, nor after its code or a heading
  inside it).
* any other line that is not blank starts *text*: a paragraph, a thematic break or a
  fenced block, with the lines after it up to a blank line, an item or a heading, and
  indented lines after a blank line. A thematic break is no paragraph: no entry goes on
  with it.

A file the tools wrote reads the same under any reasonable rules; these decide the odd,
hand-edited file, and they follow CommonMark there (an indented ``## x`` is a heading, one
after a ``~~~`` inside a backtick fence is code, a fence in a list item ends with the item,
a line two columns in under ``1. a`` or ``-   a`` ends the item, ``- - -`` is no item).
Inside an item, the lines indented by its width are read as CommonMark reads them, that
width taken off: a fence or heading four columns in under ``10) a`` is one. Lists nested
in an entry are lines of the entry, not read as lists: a fence in a nested item ends with
the entry, where CommonMark ends it with the nested item.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

_BOM = "\ufeff"
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r" {0,3}(#{1,6})(?=[ \t]|$)")
# An item line: its indent, marker (an ordered one's number in group 3), the blanks after it.
_ITEM = re.compile(r"( {0,3})([-*+]|([0-9]{1,9})[.)])([ \t]+|$)")
# A thematic break, which CommonMark reads before an item: "- - -" is none.
_BREAK = re.compile(r" {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*")
# A setext underline: under a paragraph's line it ends the paragraph (a heading to
# CommonMark, text to the tools), so no lazy line goes on with it.
_UNDERLINE = re.compile(r" {0,3}(?:=+|-+)[ \t]*")
_TAB = 4  # CommonMark's tab stop, for indentation in columns
# The title within the rest of a heading line: blanks, then the shortest text before a
# closing run of "#" — CommonMark's, which only a blank may precede ("## Notes ##" is
# "Notes", "### ###" is empty, but "## C#" is "C#").
_TITLE = re.compile(r"[ \t]*(.*?)[ \t]*(?:(?<=[ \t])#+[ \t]*)?")


class Kind(Enum):
    HEADING = "heading"
    ITEM = "item"
    TEXT = "text"


class Block(NamedTuple):  # a tuple: a parse makes one per entry, at a third of the cost
    """Consecutive lines with one role: ``start`` is its first line (never blank), ``end``
    one past its last non-blank line (or past the end of an unclosed fence)."""

    kind: Kind
    start: int
    end: int
    level: int = 0  # a heading's, 1 to 6
    title: str = ""  # a heading's, as the file spells it


@dataclass(frozen=True)
class Section:
    """A level-2 heading and its body: the lines up to the next heading of level 1 or 2
    (deeper headings belong to it), or to the end of the file."""

    heading: int  # index of the "## name" line
    end: int  # one past the last body line
    title: str

    @property
    def body_start(self) -> int:
        return self.heading + 1


@dataclass(frozen=True)
class Doc:
    """A text as :func:`parse` reads it; the edit functions index and rejoin ``lines``."""

    lines: tuple[str, ...]  # the text split at LF, as it is (CRs and the BOM kept)
    blocks: tuple[Block, ...]  # in order; the lines between them are blank
    code: frozenset[int]  # the lines of fenced code blocks, their fence lines included
    open_fence: str | None  # the fence still open at the end of the text (it runs on)
    fence_line: int = 0  # the line that opens ``open_fence`` (0 without one)
    # (opening line, fence) of a fence open inside the entry the text ends in: the end of
    # the entry ends it, so it is not ``open_fence``, but a line added to the entry is code.
    entry_fence: tuple[int, str] | None = None

    def headings(self) -> list[Block]:
        return [block for block in self.blocks if block.kind is Kind.HEADING]

    def sections(self) -> list[Section]:
        """The level-2 sections, in file order."""
        found: list[Section] = []
        headings = self.headings()
        for position, block in enumerate(headings):
            if block.level == 2:
                later = (h.start for h in headings[position + 1 :] if h.level <= 2)
                found.append(Section(block.start, next(later, len(self.lines)), block.title))
        return found

    def bare(self, index: int) -> str:
        return bare(self.lines[index], index)


def bare(line: str, index: int) -> str:
    """Line ``index`` as the rules read it: without the CR of a CR LF, and the first one
    without a byte-order mark."""
    line = line.removesuffix("\r")
    return line.removeprefix(_BOM) if index == 0 else line


def heading(line: str) -> tuple[int, str] | None:
    """(level, title) of a heading line (read by :func:`bare`), or None."""
    match = _HEADING.match(line)
    if match is None:
        return None
    return len(match.group(1)), title(line[match.end() :])


def title(rest: str) -> str:
    """The title in what follows a heading's opening run of "#" (without a closing run)."""
    found = _TITLE.fullmatch(rest)
    assert found is not None  # every rest matches: the title part may be empty
    return found.group(1)


def item_text(line: str) -> str | None:
    """An item line after its marker (``- ``, ``1. ``…), or None if it starts no item."""
    match = _ITEM.match(line)
    return None if match is None or _BREAK.fullmatch(line) else line[match.end() :]


def item_width(line: str) -> int:
    """The column an item line's text starts at (module doc): the lines indented so far or
    more are the item's. ``line`` starts an item."""
    return _item(line)[0]


def _item(line: str) -> tuple[int, bool]:
    """(width, whether its text starts a paragraph: there is some, and it is no code) of
    an item line."""
    match = _ITEM.match(line)
    assert match is not None  # the caller read an item here
    marker_end = len(match.group(1)) + len(match.group(2))
    blanks = _advance(marker_end, match.group(4)) - marker_end
    if not line[match.end() :].strip():
        return marker_end + 1, False
    return (marker_end + 1, False) if blanks > _TAB else (marker_end + blanks, True)


def indent(line: str) -> int:
    """The column of the first character of ``line`` that is not blank."""
    return _advance(0, line[: len(line) - len(line.lstrip(" \t"))])


def _advance(column: int, blanks: str) -> int:
    # The column after ``blanks`` written from ``column`` on: a tab goes to the next stop.
    for char in blanks:
        column += _TAB - column % _TAB if char == "\t" else 1
    return column


def within(line: str, width: int) -> str | None:
    """``line`` as the item of that ``width`` reads it, those columns taken off (a tab they
    split leaves its other columns as spaces); None unless it is indented so far."""
    if line.startswith(" " * width):  # the common case, at no cost of counting columns
        return line[width:]
    if "\t" not in line[:width]:
        return None
    column = 0
    for position, char in enumerate(line):
        if column >= width:
            return " " * (column - width) + line[position:]
        if char not in " \t":
            return None
        column = _advance(column, char)
    return None


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
    return None if closes and not line[match.end() :].strip() else fence


def open_fence(text: str) -> str | None:
    """The fence still open at the end of ``text``: ``Doc.open_fence``."""
    return parse(text).open_fence if may_fence(text) else None


def may_fence(text: str) -> bool:
    """Whether ``text`` may hold a fence: every fence line holds ```` ``` ```` or ``~~~``,
    so a text without either (most files) has no code, and a caller that needs only
    its fences (the prompt's closing line) can skip :func:`parse`."""
    return "```" in text or "~~~" in text


def unclosed_fence(lines: Sequence[str]) -> tuple[int, str] | None:
    """(index of its opening line, fence) of the fence still open after ``lines``, or None.
    Such a fence runs to the end of the file, so every later line, headings included, is
    code: the tools refuse text that opens one (``agent.arguments``). A fence inside an
    entry is none of these: the end of the entry ends it."""
    doc = parse("\n".join(lines))
    return None if doc.open_fence is None else (doc.fence_line, doc.open_fence)


def closing_line(text: str) -> str | None:
    """The line that closes the fence open at the end of ``text``, or None: the fence
    itself for one that runs on; for one inside the entry ``text`` ends in, the fence
    indented as its opening line, so the line is the entry's — at the margin it would end
    the entry (and the fence with it) and open a fence of its own."""
    return closing_line_of(parse(text)) if may_fence(text) else None


def closing_line_of(doc: Doc) -> str | None:
    """:func:`closing_line` of the text ``doc`` was parsed from, for a caller that already
    holds the parse (the prompt's cut reads MEMORY.md once)."""
    if doc.open_fence is not None:
        return doc.open_fence
    if doc.entry_fence is None:
        return None
    opening, fence = doc.entry_fence
    line = doc.bare(opening)
    return line[: len(line) - len(line.lstrip(" "))] + fence


def parse(text: str) -> Doc:
    """The structure of ``text`` (module doc)."""
    lines = text.split("\n")
    kinds: list[Kind] = []
    starts: list[int] = []
    ends: list[int] = []
    code: set[int] = set()
    fence: str | None = None
    opened = 0  # the line that opened ``fence``
    in_entry = False  # ``fence`` opened inside an entry, and ends with it
    held: list[int] = []  # blank lines in an entry's fence: code if the entry goes on
    after_blank = False
    lazy = False  # the line before is paragraph text, which a lazy line may go on with
    width = 0  # the width of the item the last block is; 0: none, or one that takes no lines
    hollow = False  # the last line is an item line without text: a blank line ends the item
    pad = ""  # ``width`` spaces
    for index, raw in enumerate(lines):
        line = bare(raw, index)
        if fence is not None:
            if in_entry and not line.strip():
                held.append(index)
                continue
            inner: str | None = line
            if in_entry:  # ``within``, its common case inline: most lines of a fenced file
                inner = line[width:] if line.startswith(pad) else within(line, width)
            if inner is not None:
                if held:
                    code.update(held)
                    held.clear()
                code.add(index)
                ends[-1] = index + 1
                fence = fence_after(fence, inner)
                lazy = False
                continue
            fence = None  # the entry ends here, and its fence with it (module doc)
            held.clear()
        if not line.strip():
            after_blank = True
            lazy = False
            width = 0 if hollow else width
            hollow = False
            continue
        inner = within(line, width) if width else None
        # Whether the line comes right under a paragraph's line in the same block (an
        # item's lazy line is none: it is read outside the item).
        under = lazy and (inner is not None or kinds[-1] is Kind.TEXT)
        if inner is not None:  # the item's own line, read within it
            line = inner
            kind = _starts(line, under)
            fence = fence_after(None, line)
            ends[-1] = index + 1
            hollow = False
        else:
            kind = _starts(line, under)
            fence = fence_after(None, line)
            hollow = False
            if kinds and _continues(line, kind, fence, kinds[-1], after_blank, lazy):
                ends[-1] = index + 1
            else:
                kinds.append(kind)
                starts.append(index)
                ends.append(index + 1)
                width = item_width(line) if kind is Kind.ITEM else 0
                pad = " " * width
                hollow = kind is Kind.ITEM and not item_text(line)
        lazy = fence is None and _paragraph(line, kind, under, after_blank or not lazy)
        after_blank = False
        if fence is not None:
            code.add(index)
            opened = index
            # Only a line indented under an item takes a fence into it.
            in_entry = kinds[-1] is Kind.ITEM
    blocks = tuple(_block(lines, *span) for span in zip(kinds, starts, ends, strict=True))
    if fence is not None and in_entry:
        return Doc(tuple(lines), blocks, frozenset(code), None, 0, (opened, fence))
    return Doc(tuple(lines), blocks, frozenset(code), fence, opened if fence else 0)


def _starts(line: str, under: bool) -> Kind:
    """The kind of block ``line`` starts; ``under``: it comes right under a line of a
    paragraph it may go on with, which an empty item or an ordered one not numbered 1
    does not interrupt (CommonMark)."""
    match = _ITEM.match(line)
    if match is not None and not _BREAK.fullmatch(line):
        number = match.group(3)
        empty = not line[match.end() :].strip()
        if not under or not (empty or (number is not None and int(number) != 1)):
            return Kind.ITEM
    return Kind.HEADING if _HEADING.match(line) else Kind.TEXT


def _paragraph(line: str, kind: Kind, under: bool, fresh: bool) -> bool:
    """Whether ``line`` (outside a fence) is paragraph text, which a lazy line may go on
    with: not a heading, a thematic break, a setext underline (``under``: right under a
    paragraph's line, in its block), an item line without text or whose text is code,
    nor a line of indented code (four columns in, ``fresh``: not right after a line of a
    paragraph, which it would go on with instead)."""
    if kind is Kind.HEADING or (under and _UNDERLINE.fullmatch(line)):
        return False
    if kind is Kind.ITEM:
        return _item(line)[1]
    if fresh and indent(line) >= _TAB:
        return False
    return _BREAK.fullmatch(line) is None


def _continues(
    line: str, kind: Kind, fence: str | None, last: Kind, after_blank: bool, lazy: bool
) -> bool:
    """Whether ``line`` — not blank, outside a fence, not indented as the item before it
    would take it, starting a block of ``kind`` if any, opening ``fence`` — belongs to the
    block of kind ``last`` before it; ``lazy``: the line before it is paragraph text."""
    if last is Kind.HEADING or kind is not Kind.TEXT:
        return False
    indented = line[:1] in (" ", "\t")
    if last is Kind.TEXT:
        return indented or not after_blank
    # The item's paragraph goes on, but not after its code or a heading (no paragraph to
    # go on with), nor into a fence or a thematic break: CommonMark takes no such line
    # lazily (a setext underline neither), it ends the list.
    return lazy and fence is None and _BREAK.fullmatch(line) is None


def _block(lines: Sequence[str], kind: Kind, start: int, end: int) -> Block:
    if kind is not Kind.HEADING:
        return Block(kind, start, end)
    found = heading(bare(lines[start], start))
    assert found is not None  # _starts read this line as a heading
    return Block(kind, start, end, *found)
