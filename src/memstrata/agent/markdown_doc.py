"""The structure of a memory file, read in one place: which lines are headings, entries,
other text and fenced code. The tools' sections and entries (``agent.sections``,
``agent.entries``) and the prompt's cut of MEMORY.md (``agent.prompt_body``) are all built
on :func:`parse`, so a line the tools take for a heading is a heading to the cut too; the
line that closes what is left open at the end of a text is ``agent.markdown_closing``'s.

Lines are the text split at LF, as the edit functions split it: a CR before the LF is part
of the line break (a CR LF file reads as its LF twin), and any other character — a lone
CR, U+2028, U+0085 — is text inside its line. A byte-order mark before the first line is
no part of it. Blank means whitespace only (``str.strip``).

Markdown is read as CommonMark reads it, as far as these rules need:

* a *fence* is three or more backticks or tildes after at most three spaces, closed by a
  line of the same character at least as long with nothing but spaces and tabs after it
  (no other whitespace); a backtick fence's info string holds no backtick. Inside a fence
  nothing is a heading or an entry. A fence opened in a list item (on a line indented
  under it, or on the item's line after its marker: ``- ```sh``) ends with that item if
  not before: its lines are code while they are the item's — blank, or indented by its
  width or more — and the first line that is not (a heading, an item, a fence, text, less
  indented) ends both, and is read as written, in the items that still take it; it does
  not go on with any of them, since code is no paragraph. Any other fence left open runs
  to the end of the file.
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
  line that is not blank and starts no item, heading, fence, thematic break, block quote
  or HTML block (a lone tag starts none here), after a line of text of the item (not
  after a blank line, nor after its code or a heading inside it).
* a *nested item* is a list item inside an item: on a line indented under it, or after
  its marker on its line (``- - a``, ``- 1. a``). It is read by the rules of an item, its
  lines taken off the columns of the item it is in (its width counts from there), but it
  is no entry: its lines are the entry's. It decides where what is inside the entry ends:
  a fence in it ends with it, a line indented by its width is read within it (after a
  blank line, text seven columns in under ``  1. a`` is a paragraph of that item, not
  indented code), and a line at the margin goes on with the entry only after a line of
  its paragraph.
* a *block quote* is a line with ``>`` after at most three spaces, and the lines after
  it that hold one as far in, or that go on with its last paragraph (lazy lines: not
  blank, starting no block, as an item's paragraph goes on); a blank line ends it. What
  the quote holds — the text after each ``>`` and the blank after it, a tab there read to
  the file's tab stop — is read by these rules as a file of its own, so a list, a fence
  or a quote in it decides whether its last line is paragraph text; but nothing in it is
  a heading, an entry or a fence of the file's. Quotes nest 32 deep at most; a ``>``
  deeper is text.
* an *HTML block* starts, after at most three spaces, as one of CommonMark's seven kinds
  (0.31, section 4.6) and runs to its end: ``<pre``, ``<script``, ``<style`` or
  ``<textarea`` to the line holding its closing tag, ``<!--`` to ``-->``, ``<?`` to
  ``?>``, ``<!`` and a letter to ``>``, ``<![CDATA[`` to ``]]>`` (blank lines inside
  included, the end of the file if none), and a block-level tag (``<div``,
  ``<details``, ``</p``…) or a lone open or closing tag on its line to a blank line. A
  lone tag right under a paragraph's line starts none (it goes on with the paragraph).
  Its lines are no heading, entry or fence; one that only its end ends, left open at the
  end of the text outside entries, runs on (``Doc.open_html``), as a fence does, and one
  left open inside the entry the text ends in ends with it (``Doc.entry_html``).
* block quotes and HTML blocks are read at the top level and inside items alike: on a
  line indented under an item (or after its marker: ``- > a``), one is that item's and
  ends with it if not before — a line less indented than the item's text ends the item,
  unless it is a lazy line of a quote's paragraph. Their lines are ``Doc.raw``.
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
``10) a`` is one; a ``> quote`` or ``<div>`` line right under an entry's paragraph ends
the entry, and a list item or fence in a quote or HTML block is none of the file's. The
departures: setext headings are text, a ``>`` inside 32 quotes is text (above), and a
line of other whitespace only (a no-break space, U+3000) is blank here, where CommonMark
reads it as text (only spaces and tabs make a blank line there), so the two may split
entries and paragraphs differently around it (a ``2) two`` after it is an entry here and
paragraph text to CommonMark). Memory files seldom hold such lines; the tools' edits follow
their own reading.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from memstrata.agent.markdown_blocks import html_closer, may_run_on
from memstrata.agent.markdown_lines import (
    Kind,
    fence_after,
    heading,
    indent,
    item_text,
    item_width,
    title,
)
from memstrata.agent.markdown_reader import Reader

# The line rules are read through this module too (``markdown_doc.heading``…).
__all__ = [
    "BOM",
    "Block",
    "Doc",
    "Kind",
    "OpenAtEnd",
    "Section",
    "bare",
    "fence_after",
    "heading",
    "indent",
    "item_text",
    "item_width",
    "may_fence",
    "open_at_end",
    "open_fence",
    "open_html",
    "parse",
    "title",
    "unclosed_fence",
    "unclosed_html",
]

# The byte-order mark a file saved by a Windows editor starts with: no part of its text.
BOM = "\ufeff"


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
    # The lines of block quotes (their lazy lines too) and HTML blocks, at the top level
    # and inside entries, that are not blank: the file's text, but no heading, entry,
    # fence or ``- key: value`` bullet of its own.
    raw: frozenset[int] = frozenset()
    # The line that ends an HTML block left open at the end of the text, outside entries,
    # of a kind only its end ends (``<!--`` without ``-->``): it runs on, as a fence does.
    open_html: str | None = None
    html_line: int = 0  # the line that opens ``open_html`` (0 without one)
    # (opening line, the line that ends it) of such a block open inside the entry the text
    # ends in: as ``entry_fence``, the end of the entry ends it.
    entry_html: tuple[int, str] | None = None
    # The last line of each HTML block outside entries that runs to a blank line (a
    # ``<div>``, a lone tag): a line added right after it would be part of it.
    to_blank: frozenset[int] = frozenset()
    # (opening line, the line that ends it) of a fence or an HTML block of kind 1 to 5
    # open inside a block quote at the end of the text (``> ```py``): the end of the quote
    # ends it, so the tools need not close it, but the prompt does (``markdown_closing``).
    quote_block: tuple[int, str] | None = None

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
    return line.removeprefix(BOM) if index == 0 else line


def open_fence(text: str) -> str | None:
    """The fence still open at the end of ``text``: ``Doc.open_fence``."""
    return parse(text).open_fence if may_fence(text) else None


def open_html(text: str) -> str | None:
    """The line that ends the HTML block still open at the end of ``text``:
    ``Doc.open_html``."""
    return parse(text).open_html if may_run_on(text) else None


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


def unclosed_html(lines: Sequence[str]) -> tuple[int, str] | None:
    """(index of its opening line, the line that ends it) of the HTML block of kind 1 to 5
    still open after ``lines`` (``<!--`` without ``-->``), or None: it runs to the end of
    the file as a fence does (:func:`unclosed_fence`), hiding every later line in it."""
    text = "\n".join(lines)
    doc = parse(text) if may_run_on(text) else None
    return None if doc is None or doc.open_html is None else (doc.html_line, doc.open_html)


class OpenAtEnd(NamedTuple):
    """What is open at the end of a reading, as :class:`Doc` states it."""

    open_fence: str | None
    entry_fence: tuple[int, str] | None
    open_html: str | None
    entry_html: tuple[int, str] | None
    quote_block: tuple[int, str] | None


def open_at_end(reader: Reader, line: Callable[[int], str]) -> OpenAtEnd:
    """What is open after ``reader`` read the lines ``line`` gives (by index, as read)."""
    fence, html = reader.fence, reader.html_opened
    closer = html_closer(reader.html, line(html)) if reader.html else None
    quoted = reader.open_in_quote()
    quote_block = None
    if quoted is not None and quoted.fence is not None:
        quote_block = (quoted.opened, quoted.fence)
    elif quoted is not None:
        end = html_closer(quoted.html, line(quoted.html_opened))
        quote_block = None if end is None else (quoted.html_opened, end)
    if reader.items:  # what is open ends with the entry
        return OpenAtEnd(
            None,
            None if fence is None else (reader.opened, fence),
            None,
            None if closer is None else (html, closer),
            quote_block,
        )
    return OpenAtEnd(fence, None, closer, None, quote_block)


def parse(text: str) -> Doc:
    """The structure of ``text`` (module doc)."""
    lines = text.split("\n")
    reader = Reader()
    for index, raw in enumerate(lines):
        reader.read(index, bare(raw, index))
    spans = zip(reader.kinds, reader.starts, reader.ends, strict=True)
    blocks = tuple(_block(lines, *span) for span in spans)
    if reader.html >= 6 and not reader.items:  # open at the end of the text
        reader.to_blank.append(reader.ends[-1] - 1)
    found = open_at_end(reader, lambda at: bare(lines[at], at))
    return Doc(
        tuple(lines),
        blocks,
        frozenset(reader.code),
        found.open_fence,
        reader.opened if found.open_fence else 0,
        entry_fence=found.entry_fence,
        raw=frozenset(reader.raw),
        open_html=found.open_html,
        html_line=reader.html_opened if found.open_html else 0,
        entry_html=found.entry_html,
        to_blank=frozenset(reader.to_blank),
        quote_block=found.quote_block,
    )


def _block(lines: Sequence[str], kind: Kind, start: int, end: int) -> Block:
    if kind is not Kind.HEADING:
        return Block(kind, start, end)
    found = heading(bare(lines[start], start))
    assert found is not None  # starts() read this line as a heading
    return Block(kind, start, end, *found)
