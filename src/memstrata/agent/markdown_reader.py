"""The line-by-line reading behind :func:`memstrata.agent.markdown_doc.parse` (its module doc
states the rules): a :class:`Reader` takes a file's lines in order and keeps its blocks,
code and the lines of its block quotes and HTML blocks. A block quote's lines are read
inside their ``>`` by a reader of their own, as a file of their own is: only whether its
last line is paragraph text — which a lazy line may go on with — is asked of it.
"""

from __future__ import annotations

import copy
from bisect import bisect_right

from memstrata.agent.markdown_blocks import html_ends, html_start, quote_content, quote_start
from memstrata.agent.markdown_lines import (
    BREAK,
    Kind,
    fence_after,
    indent,
    inside,
    open_items,
    paragraph,
    starts,
)

# Block quotes read one in another, at most: a line of a quote this deep reads its ">" as
# text. Each level reads the line once more, so the bound keeps a parse linear in the file
# (markdown-it stops at 20 levels of any block).
MAX_QUOTES = 32


class Reader:
    """The state of a reading: the blocks so far, and what is open at the line read last."""

    def __init__(self, quotes: int = 0) -> None:
        self.quotes = quotes  # the block quotes this reader reads inside
        self.kinds: list[Kind] = []
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.code: set[int] = set()  # the lines of this reader's own fenced blocks
        self.raw: set[int] = set()  # the lines of its block quotes and HTML blocks
        self.fence: str | None = None
        self.opened = 0  # the line that opened ``fence``
        self.held: list[int] = []  # blank lines in an item's fence or HTML block
        self.html = 0  # the kind of the HTML block open (``markdown_blocks``), 0: none
        self.html_opened = 0  # the line that opened it
        # The last lines of the HTML blocks outside items that a blank line ends (kinds 6
        # and 7, at a blank line or the end of the text): a line right after one is its.
        self.to_blank: list[int] = []
        self.quote: Reader | None = None  # the reader of the block quote open
        # Its ``open_paragraph``, kept until it reads a line: each lazy line under a quote
        # nested 32 deep asks it, and asking all 32 levels each time made such a line cost
        # a third more.
        self.quote_open: bool | None = None
        self.after_blank = False
        # The line before is paragraph text, which a lazy line may go on with (False while
        # a quote is open: its reader knows).
        self.lazy = False
        # The open list items, the entry first, then the items nested in it: the columns
        # their text starts at (their widths), each further in than the one before.
        self.items: list[int] = []
        self.hollow = False  # the last line opened an item without text: a blank ends it
        self.pad = ""  # as many spaces as the innermost item's width

    def open_paragraph(self) -> bool:
        """Whether the last line read is paragraph text, in a quote however deep."""
        if self.quote is None:
            return self.lazy
        if self.quote_open is None:
            self.quote_open = self.quote.open_paragraph()
        return self.quote_open

    def fork(self, kept: Reader | None = None) -> Reader:
        """A reader that reads on from here as this one does, holding none of what was read
        but the last block (a line may go on with it): it reads the same open fences, HTML
        blocks, quotes and items, but its ``code``, ``raw`` and blocks hold only what it
        reads itself. The prompt's cut asks what is open after many prefixes of one text,
        each read on from a fork of the reading before it (``markdown_closing.Prefixes``).

        ``kept``: a fork that, as this one, is kept and never read on, only forked again;
        they share their open items when equal (a line of 30 000 nested markers and lazy
        lines under it made a hundred forks hold 30 MB of copies)."""
        other = copy.copy(self)
        other.kinds, other.starts, other.ends = self.kinds[-1:], self.starts[-1:], self.ends[-1:]
        other.code, other.raw, other.held, other.to_blank = set(), set(), [], []
        same = kept is not None and kept.items == self.items
        other.items = kept.items if kept is not None and same else list(self.items)
        other.quote = None if self.quote is None else self.quote.fork()
        return other

    def open_in_quote(self) -> Reader | None:
        """The reader of the innermost block quote open, however deep, that has a fence or
        an HTML block open (a quote's ends with the quote), or None."""
        inner = self.quote
        while inner is not None and inner.fence is None and not inner.html:
            inner = inner.quote
        return inner

    def read(self, index: int, line: str) -> None:
        """Read line ``index``, ``line`` (without its line break)."""
        if line[:1].isalpha() and self.fence is None and not self.html and self.open_paragraph():
            # The common line, read at the cost of a look: at the margin, starting no
            # block, right under paragraph text (a quote's too, however deep), it goes on
            # with that paragraph and every item and quote open (a lazy line), as the
            # rules below would read it.
            self._extend(index)
            if self.quote is not None:
                self.raw.add(index)
            return
        open_block = self.fence is not None or self.html or self.quote is not None
        if open_block and self._goes_on(index, line):
            return
        items = self.items
        if not line.strip():
            self.after_blank = True
            self.lazy = False
            if self.hollow:
                items.pop()
                self.pad = " " * items[-1] if items else ""
                self.hollow = False
            return
        # The items that take the line (indented as far as their text starts), and the
        # line within the innermost of them.
        depth = len(items)
        rest: str | None = line
        if depth:
            tabless = line.startswith(self.pad) and "\t" not in line
            rest = line[len(self.pad) :] if tabless else inside(line, items[-1])
        if rest is None:  # the items whose widths the line reaches (``items`` ascends)
            depth = bisect_right(items, indent(line), 0, depth - 1)
            within = inside(line, items[depth - 1]) if depth else line
            assert within is not None  # the line reaches that item's width
            rest = within
        if self.quote is not None:  # a line without its ">": a lazy line, or the end
            if self.quote.open_paragraph() and _lazy(rest, starts(rest, False)):
                self._extend(index)
                self.raw.add(index)
                return
            self.quote = None
        lazy = self.lazy
        under = lazy and depth == len(items)
        kind = starts(rest, under)
        if depth < len(items):
            if lazy and _lazy(rest, kind):  # every item stays open
                self._extend(index)
                return
            del items[depth:]
            self.pad = " " * items[-1] if items else ""
        self.hollow = False
        kinds = self.kinds
        if depth or (kinds and _continues(rest, kind, kinds[-1], self.after_blank)):
            self.ends[-1] = index + 1
        else:
            kinds.append(kind)
            self.starts.append(index)
            self.ends.append(index + 1)
        fresh = self.after_blank or not lazy
        self.after_blank = False
        # The items the line opens, one in the other (``- 1. a``), then what their text
        # starts: a fence, a heading, a paragraph, a quote, an HTML block.
        if kind is Kind.ITEM:
            widths, rest = open_items(rest, items[-1] if depth else 0)
            items.extend(widths)
            self.hollow = not rest
            kind = starts(rest, False)
            under = False
            fresh = True
            self.pad = " " * items[-1]
        self.fence = fence_after(None, rest)
        self.lazy = not self.hollow and paragraph(rest, kind, under, fresh)
        if self.fence is not None:
            self.lazy = False
            self.code.add(index)
            self.opened = index
        elif kind is Kind.TEXT and self.lazy:
            self._start_block(index, rest, under)

    def _start_block(self, index: int, text: str, under: bool) -> None:
        # A block quote or HTML block that ``text`` — a line's text as the innermost open
        # item reads it, or the whole line — starts, if any: no paragraph to go on with.
        column = self.items[-1] if self.items else 0  # where ``text`` starts in the file
        content = quote_content(text, column) if self.quotes < MAX_QUOTES else None
        if content is not None:
            self.quote = Reader(self.quotes + 1)
            self.quote_open = None
            self.quote.read(index, content)
        else:
            self.html = html_start(text, under)
            if not self.html:
                return
            self.html_opened = index
            if html_ends(self.html, text):
                self.html = 0
        self.raw.add(index)
        self.lazy = False

    def _goes_on(self, index: int, line: str) -> bool:
        """Whether line ``index`` goes on with the fence, HTML block or quote open: it is
        the innermost item's, or none is open (a blank line in a fence or an HTML block of
        kind 1 to 5 waits for the next line: it is the item's if that line is). Else that
        block ends, and the line is read as any other."""
        blank = not line.strip()
        if blank and (self.quote is not None or self.html >= 6):
            if self.html and not self.items:
                self.to_blank.append(self.ends[-1] - 1)
            self.quote = None  # a quote's lines all hold a ">"; an HTML block 6 or 7 ends
            self.html = 0
            return False
        if blank and (self.items or self.html):
            if self.items:
                self.held.append(index)
            return True  # (outside items, an HTML block's blank line is simply its own)
        # ``inside``, its common case inline: most lines of a fenced file are code (a
        # fence's blank line outside items too).
        inner: str | None = line
        if self.items:
            tabless = line.startswith(self.pad) and "\t" not in line
            inner = line[len(self.pad) :] if tabless else inside(line, self.items[-1])
        if self.quote is not None:
            column = self.items[-1] if self.items else 0
            content = None if inner is None else quote_content(inner, column)
            if content is None:
                return False
            self.quote_open = None
            self.quote.read(index, content)
            self.raw.add(index)
        elif inner is None:
            self.fence = None
            self.html = 0
            self.held.clear()
            return False
        elif self.html:
            self.raw.add(index)
            if html_ends(self.html, inner):
                self.html = 0
        else:
            assert self.fence is not None  # one of the three is open
            self.code.update(self.held)
            self.code.add(index)
            self.fence = fence_after(self.fence, inner)
        self.held.clear()
        self.ends[-1] = index + 1
        return True

    def _extend(self, index: int) -> None:
        # A lazy line: the block before goes on with it, every item staying open.
        self.ends[-1] = index + 1
        self.after_blank = False


def _lazy(line: str, kind: Kind) -> bool:
    """Whether ``line``, read within the last item that takes it, goes on with the
    paragraph of an item or quote further in (a lazy line): it starts no block there — no
    item, heading, fence, thematic break, quote or HTML block but a lone tag (``===`` is
    text here: it underlines no paragraph of the item it is read in)."""
    if kind is not Kind.TEXT or fence_after(None, line) is not None or BREAK.fullmatch(line):
        return False
    return not quote_start(line) and not html_start(line, True)


def _continues(line: str, kind: Kind, last: Kind, after_blank: bool) -> bool:
    """Whether ``line`` — not blank, outside a fence and every item, starting a block of
    ``kind`` if any — belongs to the block of kind ``last`` before it: the text block it
    is a line of (an entry's lazy lines are read before)."""
    if last is not Kind.TEXT or kind is not Kind.TEXT:
        return False
    return line[:1] in (" ", "\t") or not after_blank
