"""The line that closes a fence or HTML block left open at the end of a text.

The prompt's cut of MEMORY.md ends wherever the token budget falls, perhaps inside a
fence or an ``<!--`` block; it appends this line so the rest of the prompt is not read as
code or as a comment. :class:`Prefixes` answers it for the many prefixes of one file the
cut's binary search tries, reading each line about once. What is open is read by
:func:`memstrata.agent.markdown_doc.parse`; this module only says how to close it.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable
from functools import cached_property
from itertools import accumulate

from memstrata.agent.markdown_blocks import may_run_on
from memstrata.agent.markdown_doc import (
    Doc,
    OpenAtEnd,
    bare,
    may_fence,
    open_at_end,
    parse,
)
from memstrata.agent.markdown_lines import TAB
from memstrata.agent.markdown_reader import Reader


def may_close(text: str) -> bool:
    """Whether ``text`` may end inside a block only its end ends: a fence, or an HTML
    block of kind 1 to 5 (``markdown_blocks.may_run_on``). Without either, it has no
    :func:`closing_line`, which a caller can skip :func:`parse` for."""
    return may_fence(text) or may_run_on(text)


def closing_line(text: str) -> str | None:
    """The line that closes the fence or HTML block of kind 1 to 5 open at the end of
    ``text``, or None: the fence itself (or the block's end, ``-->`` for ``<!--``) for one
    that runs on; for one inside the entry ``text`` ends in, that line as far in as the
    block's opening fence or ``<`` stands (after the marker of an item that line opens),
    so the line is that item's — less indented it would end the item (and the block with
    it), a fence line opening a fence of its own. For one inside a block quote, that line
    with the quote's ``>`` where the opening line has them (``> ```py`` is closed by
    ``> ````): without them the line would end the quote, and a fence line would open a
    fence of its own that runs on."""
    return closing_line_of(parse(text)) if may_close(text) else None


def closing_line_of(doc: Doc) -> str | None:
    """:func:`closing_line` of the text ``doc`` was parsed from, for a caller that already
    holds the parse (the prompt's cut reads MEMORY.md once)."""
    found = OpenAtEnd(
        doc.open_fence, doc.entry_fence, doc.open_html, doc.entry_html, doc.quote_block
    )
    return _closing(found, doc.bare)


def _closing(found: OpenAtEnd, line: Callable[[int], str]) -> str | None:
    if found.open_fence is not None or found.open_html is not None:
        return found.open_fence or found.open_html
    if found.entry_fence is not None:
        opening, fence = found.entry_fence
        return _in_entry(line(opening), fence[0], fence)
    if found.entry_html is not None:
        opening, end = found.entry_html
        return _in_entry(line(opening), "<", end)
    if found.quote_block is not None:
        opening, end = found.quote_block
        return _in_entry(line(opening), end[0] if end[0] in "`~" else "<", end)
    return None


def _in_entry(line: str, first: str, closing: str) -> str:
    """``closing`` as far in as the block that ``line`` opens, with its first character
    ``first``, stands: the blanks and item markers before it written as spaces (a tab as
    the columns to its stop), a block quote's ``>`` kept, so the line is in every item and
    quote the block is in."""
    column = 0
    kept: list[str] = []
    for char in line[: line.index(first)]:
        width = TAB - column % TAB if char == "\t" else 1
        kept.append(">" if char == ">" else " " * width)
        column += width
    return "".join(kept) + closing


class Prefixes:
    """:func:`closing_line` of many texts that share their first lines with ``text`` (the
    prompt's cut tries a prefix of one file per step of its binary search), reading each
    line about once rather than once per prefix.

    The reading is online: what is open after a line depends on the lines before it only,
    so a prefix is read on from a :meth:`Reader.fork` of a reading of the lines it shares
    with ``text``; forks are kept every ``len(text) / 128`` characters or so read, and a
    prefix is read on from the last one before it. Any other text is parsed whole.
    """

    def __init__(self, text: str, every: int | None = None) -> None:
        """``every``: the characters read between kept forks (tests set it small)."""
        self.text = text
        self._step = max(len(text) // 128, 1024) if every is None else every
        self._read: list[int] = [0]  # the lines each kept reading has read, ascending
        self._readers: list[Reader] = [Reader()]

    # Made when a prefix is first read: most files close nothing, and ask for no line.
    @cached_property
    def lines(self) -> list[str]:
        return self.text.split("\n")

    @cached_property
    def _line_starts(self) -> list[int]:
        """Where each line of ``text`` starts in it."""
        return list(accumulate((len(line) + 1 for line in self.lines), initial=0))

    def closing_line(self, prefix: str) -> str | None:
        """``closing_line(prefix)``."""
        if not may_close(prefix):
            return None
        last_start = prefix.rfind("\n") + 1
        if last_start and prefix[:last_start] != self.text[:last_start]:
            return closing_line(prefix)
        index = bisect_left(self._line_starts, last_start)  # the line ``last_start`` starts
        last = prefix[last_start:]
        reader = self._reading(index)
        reader.read(index, bare(last, index))
        lines = self.lines

        def line(at: int) -> str:
            return bare(last if at == index else lines[at], at)

        return _closing(open_at_end(reader, line), line)

    def _reading(self, index: int) -> Reader:
        """A reader of lines ``0 .. index - 1`` of ``text``, forks kept on the way."""
        kept = bisect_right(self._read, index) - 1
        at = self._read[kept]
        reader = self._readers[kept].fork()
        since = 0
        for position in range(at, index):
            if since >= self._step:
                kept += 1
                self._read.insert(kept, position)
                self._readers.insert(kept, reader.fork(self._readers[kept - 1]))
                since = 0
            line = self.lines[position]
            reader.read(position, bare(line, position))
            since += len(line) + 1
        return reader
