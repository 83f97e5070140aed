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
  info string holds no backtick. Inside a fence nothing is a heading or an entry, and a
  fence left open runs to the end of the file.
* a *heading* is one to six ``#`` after at most three spaces, then a space, a tab or the
  line's end (setext headings are not read); its title is the text after the ``#`` run,
  without surrounding blanks and the ``#`` characters that end the line.
* an *item* — an entry — is a top-level list item: ``-``, ``*``, ``+``, ``1.`` or ``1)``
  after at most one space, then a space, a tab or the line's end. Its lines are the item
  line, every later line indented by two columns or more (a nested list, a heading or a
  fence inside the item; after blank lines too), and the lines of its paragraph: any line
  that is not blank and starts no item or heading, nor a fence at the margin.
* any other line that is not blank starts *text*: a paragraph or a fenced block, with the
  lines after it up to a blank line, an item or a heading, and indented lines after a blank
  line.

A file the tools wrote reads the same under any reasonable rules; these decide the odd,
hand-edited file, and they follow CommonMark there (an indented ``## x`` is a heading, one
after a ``~~~`` inside a backtick fence is code) except that a fence is tracked over the
whole file, not closed with the list item it opens in.
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
_ITEM = re.compile(r" ?(?:[-*+]|[0-9]{1,9}[.)])(?:[ \t]+|$)")
# The title within the rest of a heading line: blanks, then the shortest text before a
# closing run of "#" — CommonMark's, which only a blank may precede ("## Notes ##" is
# "Notes", "### ###" is empty, but "## C#" is "C#").
_TITLE = re.compile(r"[ \t]*(.*?)[ \t]*(?:(?<=[ \t])#+[ \t]*)?")
# Two columns in: under a "- " item, not beside it (``dated_bullet`` indents by two).
_NESTED = ("  ", "\t", " \t")


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
    open_fence: str | None  # the fence still open at the end of the text

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
    return None if match is None else line[match.end() :]


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
    """The fence still open at the end of ``text`` (``Doc.open_fence`` without the rest
    of a parse: the prompt's cut asks it of every cut it tries)."""
    found = unclosed_fence(text.split("\n"))
    return None if found is None else found[1]


def unclosed_fence(lines: Sequence[str]) -> tuple[int, str] | None:
    """(index of its opening line, fence) of the fence still open after ``lines``, or None.
    Such a fence runs to the end of the file, so every later line, headings included, is
    code: the tools refuse text that opens one (``agent.arguments``)."""
    fence: str | None = None
    opened = 0
    for index, line in enumerate(lines):
        after = fence_after(fence, bare(line, index))
        if fence is None and after is not None:
            opened = index
        fence = after
    return None if fence is None else (opened, fence)


def parse(text: str) -> Doc:
    """The structure of ``text`` (module doc)."""
    lines = text.split("\n")
    kinds: list[Kind] = []
    starts: list[int] = []
    ends: list[int] = []
    code: set[int] = set()
    fence: str | None = None
    after_blank = False
    for index, raw in enumerate(lines):
        line = bare(raw, index)
        if fence is not None:
            code.add(index)
            ends[-1] = index + 1
            fence = fence_after(fence, line)
            continue
        if not line.strip():
            after_blank = True
            continue
        kind = _starts(line)
        fence = fence_after(None, line)
        if kinds and _continues(line, kind, fence, kinds[-1], after_blank):
            ends[-1] = index + 1
        else:
            kinds.append(kind)
            starts.append(index)
            ends.append(index + 1)
        after_blank = False
        if fence is not None:
            code.add(index)
    blocks = tuple(_block(lines, *span) for span in zip(kinds, starts, ends, strict=True))
    return Doc(tuple(lines), blocks, frozenset(code), fence)


def _starts(line: str) -> Kind:
    if _ITEM.match(line):
        return Kind.ITEM
    return Kind.HEADING if _HEADING.match(line) else Kind.TEXT


def _continues(line: str, kind: Kind, fence: str | None, last: Kind, after_blank: bool) -> bool:
    """Whether ``line`` — not blank, outside a fence, starting a block of ``kind`` if any,
    opening ``fence`` — belongs to the block of kind ``last`` before it."""
    if last is Kind.ITEM and line.startswith(_NESTED):
        return True
    if last is Kind.HEADING or kind is not Kind.TEXT:
        return False
    indented = line[:1] in (" ", "\t")
    if last is Kind.TEXT:
        return indented or not after_blank
    # The item's paragraph goes on, up to a fence at the margin (it is not inside).
    return not after_blank and (indented or fence is None)


def _block(lines: Sequence[str], kind: Kind, start: int, end: int) -> Block:
    if kind is not Kind.HEADING:
        return Block(kind, start, end)
    found = heading(bare(lines[start], start))
    assert found is not None  # _starts read this line as a heading
    return Block(kind, start, end, *found)
