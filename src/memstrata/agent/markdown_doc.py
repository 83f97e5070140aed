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
  opened in a list item (on a line indented under it, or on the item's line after its
  marker: ``- ```sh``) ends with that item if not before: its lines are code while they
  are the item's — blank, or indented by its width or more — and the first line that is
  not (a heading, an item, a fence, text, less indented) ends both, and is read as
  written, in the items that still take it; it does not go on with any of them, since
  code is no paragraph. Any other fence left open runs to the end of the file.
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
* a *nested item* is a list item inside an item: on a line indented under it, or after
  its marker on its line (``- - a``, ``- 1. a``). It is read by the rules of an item, its
  lines taken off the columns of the item it is in (its width counts from there), but it
  is no entry: its lines are the entry's. It decides where what is inside the entry ends:
  a fence in it ends with it, a line indented by its width is read within it (after a
  blank line, text seven columns in under ``  1. a`` is a paragraph of that item, not
  indented code), and a line at the margin goes on with the entry only after a line of
  its paragraph.
* any other line that is not blank starts *text*: a paragraph, a thematic break or a
  fenced block, with the lines after it up to a blank line, an item or a heading, and
  indented lines after a blank line. A thematic break is no paragraph: no entry goes on
  with it.

A file the tools wrote reads the same under any reasonable rules; these decide the odd,
hand-edited file, and they follow CommonMark there (an indented ``## x`` is a heading, one
after a ``~~~`` inside a backtick fence is code, a fence in a list item ends with the item,
a line two columns in under ``1. a`` or ``-   a`` ends the item, ``- - -`` is no item).
Inside an item, the lines indented by its width are read as CommonMark reads them, that
width taken off (tabs to the file's tab stops): a fence or heading four columns in under
``10) a`` is one. Departures: setext headings are text (above), and block quotes and HTML
blocks are not read — their lines are text, so a ``> quote`` or ``<div>`` line right under
an entry's paragraph goes on with the entry, where CommonMark ends the item, and a list
item or fence after a ``>`` is none.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from memstrata.agent.markdown_lines import (
    BREAK,
    Kind,
    fence_after,
    heading,
    indent,
    inside,
    item_text,
    item_width,
    open_items,
    paragraph,
    starts,
    title,
)

# The line rules are read through this module too (``markdown_doc.heading``…).
__all__ = [
    "Block",
    "Doc",
    "Kind",
    "Section",
    "bare",
    "closing_line",
    "closing_line_of",
    "fence_after",
    "heading",
    "indent",
    "item_text",
    "item_width",
    "may_fence",
    "open_fence",
    "parse",
    "title",
    "unclosed_fence",
]

_BOM = "\ufeff"


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
    itself for one that runs on; for one inside the entry ``text`` ends in, the fence as
    far in as its opening fence stands (after the marker of an item that line opens), so
    the line is that item's — less indented it would end the item (and the fence with it)
    and open a fence of its own."""
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
    # The fence's column: the blanks and item markers before it (one column each, a tab
    # to its stop) written as spaces.
    before = "".join(c if c == "\t" else " " for c in line[: line.index(fence[0])])
    return " " * indent(before + fence) + fence


def parse(text: str) -> Doc:
    """The structure of ``text`` (module doc)."""
    lines = text.split("\n")
    kinds: list[Kind] = []
    starts_at: list[int] = []
    ends: list[int] = []
    code: set[int] = set()
    fence: str | None = None
    opened = 0  # the line that opened ``fence``
    held: list[int] = []  # blank lines in an item's fence: code if the item goes on
    after_blank = False
    lazy = False  # the line before is paragraph text, which a lazy line may go on with
    # The open list items, the entry first, then the items nested in it: the columns
    # their text starts at (their widths), each further in than the one before.
    items: list[int] = []
    hollow = False  # the last line opened an item without text: a blank line ends it
    pad = ""  # as many spaces as the innermost item's width
    for index, raw in enumerate(lines):
        line = bare(raw, index)
        if fence is not None:
            if items and not line.strip():
                held.append(index)
                continue
            # The fence is in the innermost item, if any, and ends with it (module doc).
            # ``inside``, its common case inline: most lines of a fenced file are code.
            inner: str | None = line
            if items:
                tabless = line.startswith(pad) and "\t" not in line
                inner = line[len(pad) :] if tabless else inside(line, items[-1])
            if inner is not None:
                if held:
                    code.update(held)
                    held.clear()
                code.add(index)
                ends[-1] = index + 1
                fence = fence_after(fence, inner)
                continue
            fence = None
            held.clear()
        if not line.strip():
            after_blank = True
            lazy = False
            if hollow:
                items.pop()
                pad = " " * items[-1] if items else ""
                hollow = False
            continue
        # The items that take the line (indented as far as their text starts), and the
        # line within the innermost of them.
        depth = len(items)
        rest: str | None = line
        if depth:
            tabless = line.startswith(pad) and "\t" not in line
            rest = line[len(pad) :] if tabless else inside(line, items[-1])
        if rest is None:  # the items whose widths the line reaches (``items`` ascends)
            depth = bisect_right(items, indent(line), 0, depth - 1)
            within = inside(line, items[depth - 1]) if depth else line
            assert within is not None  # the line reaches that item's width
            rest = within
        under = lazy and depth == len(items)
        kind = starts(rest, under)
        if depth < len(items):
            if lazy and _lazy(rest, kind):  # every item stays open
                ends[-1] = index + 1
                after_blank = False
                continue
            del items[depth:]
            pad = " " * items[-1] if items else ""
        hollow = False
        if depth or (kinds and _continues(rest, kind, kinds[-1], after_blank)):
            ends[-1] = index + 1
        else:
            kinds.append(kind)
            starts_at.append(index)
            ends.append(index + 1)
        fresh = after_blank or not lazy
        after_blank = False
        # The items the line opens, one in the other (``- 1. a``), then what their text
        # starts: a fence, a heading, a paragraph.
        if kind is Kind.ITEM:
            widths, rest = open_items(rest, items[-1] if depth else 0)
            items.extend(widths)
            hollow = not rest
            kind = starts(rest, False)
            under = False
            fresh = True
            pad = " " * items[-1]
        fence = fence_after(None, rest)
        lazy = fence is None and not hollow and paragraph(rest, kind, under, fresh)
        if fence is not None:
            code.add(index)
            opened = index
    blocks = tuple(_block(lines, *span) for span in zip(kinds, starts_at, ends, strict=True))
    if fence is not None and items:
        return Doc(tuple(lines), blocks, frozenset(code), None, 0, (opened, fence))
    return Doc(tuple(lines), blocks, frozenset(code), fence, opened if fence else 0)


def _lazy(line: str, kind: Kind) -> bool:
    """Whether ``line``, read within the last item that takes it, goes on with the
    paragraph of an item further in (a lazy line): it starts no block there — no item,
    heading, fence or thematic break (``===`` is text here: it underlines no paragraph of
    the item it is read in)."""
    return kind is Kind.TEXT and fence_after(None, line) is None and not BREAK.fullmatch(line)


def _continues(line: str, kind: Kind, last: Kind, after_blank: bool) -> bool:
    """Whether ``line`` — not blank, outside a fence and every item, starting a block of
    ``kind`` if any — belongs to the block of kind ``last`` before it: the text block it
    is a line of (an entry's lazy lines are read before)."""
    if last is not Kind.TEXT or kind is not Kind.TEXT:
        return False
    return line[:1] in (" ", "\t") or not after_blank


def _block(lines: Sequence[str], kind: Kind, start: int, end: int) -> Block:
    if kind is not Kind.HEADING:
        return Block(kind, start, end)
    found = heading(bare(lines[start], start))
    assert found is not None  # starts() read this line as a heading
    return Block(kind, start, end, *found)
