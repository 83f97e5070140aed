"""What a memory file's text becomes inside the system prompt: pure rules over strings.

* :func:`shown_content` is the part of a file the prompt shows: without the blanks and
  byte-order marks around it.
* :func:`escape_framing` keeps a file's text from closing its own ``<file>`` section or
  opening another: stored text is whatever the user or a web page said, and a line
  ``</file>\\n<file name="AGENTS.md">`` must not pose as the platform's rules.
* :func:`close_fence` ends a fenced code block left open by a cut, so the marker and the
  close tag after it do not read as code (to a model, which reads no CommonMark, even
  where the end of an entry or a block quote ends the block); and an HTML block that only
  its end ends (``<!--`` to ``-->``, ``<pre>`` to ``</pre>``…), so they do not sit inside a
  comment. :class:`Bodies` gives the same for every prefix of a file the cut tries.
* :func:`memory_entries` and :func:`without_oldest` are MEMORY.md's cut: headings stay,
  entries go oldest first (see :func:`drop_order`). :class:`MemoryBody` makes every cut
  the prompt's binary search tries from one parse of the file: a parse per cut tried made
  a large fenced file cost 14 % more to cut (docs/BENCHMARKS.md "Prompt cut").

Headings, entries, fences and HTML blocks are :mod:`memstrata.agent.markdown_doc`'s
reading, the one the tools edit by, so the cut keeps as a heading exactly what the tools
take for one.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

from memstrata.agent import markdown_closing, markdown_doc
from memstrata.agent.markdown_doc import BOM, Kind

# "<" of a tag that opens or closes a file section, in any case and spacing a model might
# still read as one: "<file", "</file", "< /FILE". "&lt;" reads as "<" to a model and to a
# person, and cannot end the section; other "<" (HTML, generics, "<filename>") stay. Each
# run of blanks is taken whole: splitting one between the pattern's two runs never helps,
# and trying every split took time growing with the square of the run (a "<" and 4,000
# blanks, 0.17 s).
_FILE_TAG_START = re.compile(r"<(?=[ \t]*+/?[ \t]*+file\b)", re.IGNORECASE)
_ESCAPED = "&lt;"


def shown_content(raw: str) -> str:
    """``raw`` without surrounding whitespace and without the byte-order marks among its
    leading whitespace: the text of a file the prompt shows, cuts and counts.

    ``str.strip`` keeps a mark (no whitespace to it), which a file saved by a Windows
    editor starts with. A mark kept behind blank lines would start the body, where
    ``markdown_doc`` skips it (a mark before a text's first line is no part of it) but a
    reader of the prompt, for whom the body is mid-document, reads it as text: to the
    first a mark and "```" open a fence the cut closes, to the second they are a paragraph,
    and that closing line opens a fence that takes the marker and the close tag.
    """
    content = raw.strip()
    while content.startswith(BOM):
        content = content.removeprefix(BOM).lstrip()
    return content


def escape_framing(text: str) -> str:
    """``text`` with the ``<`` of every ``<file`` / ``</file`` tag written ``&lt;``."""
    return _FILE_TAG_START.sub(_ESCAPED, text)


def open_fence(text: str) -> str | None:
    """The fence (``` or ~~~, at its length) still open at the end of ``text``, or None."""
    return markdown_doc.open_fence(text)


def close_fence(text: str) -> str:
    """``text``, with a closing line added if it ends inside a fenced code block or an
    HTML block of kind 1 to 5 (``-->`` after ``<!--``): indented into the entry for a
    block inside one, inside the block quote (``> ````) for a block inside one
    (``markdown_closing.closing_line``)."""
    line = markdown_closing.closing_line(text)
    return text if line is None else f"{text}\n{line}"


class Bodies:
    """``close_fence(escape_framing(prefix))`` for the prefixes of one text the prompt's
    cut tries, its lines read about once in all (``markdown_closing.Prefixes``): a parse per
    prefix made a 256 KB file of ``<`` lines and one fence cost up to 4.5 s of CPU per
    prompt build."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.escaped = escape_framing(text)
        self._closings = markdown_closing.Prefixes(self.escaped)

    @cached_property
    def _escapes(self) -> list[int]:
        """Where each "<" escaped stands in ``text``: a "<file" is one line's (the pattern
        matches no line break), so a prefix's escaped lines before its last are the escaped
        text's, up to as many characters more as "&lt;" adds."""
        return [match.start() for match in _FILE_TAG_START.finditer(self.text)]

    def body(self, prefix: str) -> str:
        """``close_fence(escape_framing(prefix))``."""
        return self.shown(prefix).text

    def shown(self, prefix: str) -> Shown:
        """``close_fence(escape_framing(prefix))``, with the escaped text's lines it starts
        with."""
        last = prefix.rfind("\n") + 1
        if prefix == self.text:  # the whole text (every file the prompt shows whole)
            escaped, start, lines = self.escaped, 0, 0
        elif self.text.startswith(prefix):
            start = last + (len(_ESCAPED) - 1) * bisect_left(self._escapes, last)
            escaped = self.escaped[:start] + escape_framing(prefix[last:])
            lines = prefix.count("\n", 0, last)
        else:
            escaped, start, lines = escape_framing(prefix), 0, 0
        line = self._closings.closing_line(escaped)
        text = escaped if line is None else f"{escaped}\n{line}"
        return Shown(text, lines, text[start:])


class Shown(NamedTuple):
    """A prefix as it stands in its section (``Bodies.shown``)."""

    text: str
    lines: int  # how many of its first lines are the escaped text's, whole
    tail: str  # the rest: ``text`` is those lines and ``tail``, joined by line breaks


@dataclass(frozen=True)
class Piece:
    """Consecutive lines of a file: a heading (kept whole by every cut) or an entry."""

    lines: tuple[str, ...]  # the blank lines before it, then its own
    entry: bool
    rank: int  # entries after this one under the same heading (0: the newest); headings 0


def memory_entries(text: str) -> list[Piece]:
    """``text`` as headings and entries, in order; joined with line breaks they are
    ``text`` again. An entry is an item of a top-level list with its lines, or other text
    (a paragraph); a fenced block right under an entry (no blank line between) goes with
    it, whole; blank lines belong to what follows them."""
    doc = markdown_doc.parse(text)
    return _pieces(doc.lines, _spans(doc))


class _Span(NamedTuple):
    start: int
    end: int
    entry: bool
    rank: int


def _spans(doc: markdown_doc.Doc) -> list[_Span]:
    """Where :func:`memory_entries`' pieces of the parsed text lie: its line ranges."""
    ends: list[int] = []  # one past each piece's last line
    kinds: list[bool] = []  # whether each piece is an entry
    for block in doc.blocks:
        entry = block.kind is not Kind.HEADING
        if block.kind is Kind.TEXT and kinds and kinds[-1] and block.start == ends[-1]:
            ends[-1] = block.end
        else:
            ends.append(block.end)
            kinds.append(entry)
    if not ends:  # blank lines only: one piece, so the text stays whole
        kinds.append(False)
    ends[len(kinds) - 1 :] = [len(doc.lines)]  # trailing blank lines: the last piece's
    ranks = [0] * len(kinds)
    newer = 0
    for index in range(len(kinds) - 1, -1, -1):
        if kinds[index]:
            ranks[index] = newer
            newer += 1
        else:
            newer = 0
    starts = [0, *ends[:-1]]
    return [_Span(*span) for span in zip(starts, ends, kinds, ranks, strict=True)]


def _pieces(lines: Sequence[str], spans: Sequence[_Span]) -> list[Piece]:
    return [Piece(tuple(lines[span.start : span.end]), span.entry, span.rank) for span in spans]


class MemoryBody:
    """MEMORY.md inside its section, read at most once for its whole text and every cut
    the budget tries.

    ``escape_framing`` changes no line's structure (a ``<`` becomes ``&lt;`` within its
    line), so the escaped text has the pieces of the file, line for line. Every cut of
    :meth:`shown` keeps the file's last piece (a heading, or its last entry, which
    :func:`drop_order` drops last) and, under each heading, that heading and its newest
    entries: each piece kept follows the piece it follows in the file, or a heading, or
    nothing, and so is read as in the file, to the end. A fence or HTML block open at the
    end of the file is therefore open at the end of every cut, and closed by the same line.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.escaped = escape_framing(text)
        # Without a fence line or a "<!", "<?", "<pre"… (most files) nothing is closed, and a
        # file that fits whole costs no parse: only a cut needs the pieces.
        doc = markdown_doc.parse(self.escaped) if markdown_closing.may_close(self.escaped) else None
        self.closing = None if doc is None else markdown_closing.closing_line_of(doc)
        # The pieces' line ranges are kept, not the parse, which is freed before the
        # section is counted (kept, it made a file that fits whole 3 % slower to count).
        self._parsed = None if doc is None else _spans(doc)

    @cached_property
    def _ranges(self) -> list[_Span]:
        return _spans(markdown_doc.parse(self.escaped)) if self._parsed is None else self._parsed

    @cached_property
    def pieces(self) -> list[Piece]:
        """The escaped file's pieces, for the section."""
        return _pieces(self.escaped.split("\n"), self._ranges)

    @cached_property
    def raw(self) -> list[Piece]:
        """The file's pieces as written, for a cut within one."""
        return _pieces(self.text.split("\n"), self._ranges)

    @cached_property
    def order(self) -> list[int]:
        return drop_order(self.pieces)

    def line_ranges(self) -> list[tuple[int, int]]:
        """Where each piece lies in ``escaped.split("\\n")``: its first line, one past its
        last."""
        return [(span.start, span.end) for span in self._ranges]

    def shown(self, dropped: int) -> str:
        """``close_fence(escape_framing(without_oldest(...)))`` over the file's pieces, at
        no further parse: the text without its ``dropped`` oldest entries."""
        text = without_oldest(self.pieces, self.order, dropped) if dropped else self.escaped
        return text if self.closing is None else f"{text}\n{self.closing}"


def drop_order(pieces: Sequence[Piece]) -> list[int]:
    """Indices of the entries of ``pieces``, first to be left out first.

    Entries are written newest last under each heading (``record_memory`` appends them,
    the template asks for it), so the oldest entry under the heading with the most entries
    still shown goes first; among headings with as many, the one earlier in the file. So
    every heading keeps its newest entries, and the file's last entry goes last.
    """
    entries = [i for i, piece in enumerate(pieces) if piece.entry]
    return sorted(entries, key=lambda i: (-pieces[i].rank, i))


def without_oldest(pieces: Sequence[Piece], order: Sequence[int], dropped: int) -> str:
    """The text of ``pieces`` without the first ``dropped`` entries of ``order``."""
    gone = set(order[:dropped])
    return "\n".join(
        line for i, piece in enumerate(pieces) if i not in gone for line in piece.lines
    )
