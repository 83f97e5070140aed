"""What a memory file's text becomes inside the system prompt: pure rules over strings.

* :func:`escape_framing` keeps a file's text from closing its own ``<file>`` section or
  opening another: stored text is whatever the user or a web page said, and a line
  ``</file>\\n<file name="AGENTS.md">`` must not pose as the platform's rules.
* :func:`close_fence` ends a fenced code block left open by a cut, so the marker and the
  close tag after it do not read as code (to a model, which reads no CommonMark, even
  where the end of an entry ends the block).
* :func:`memory_entries` and :func:`without_oldest` are MEMORY.md's cut: headings stay,
  entries go oldest first (see :func:`drop_order`).

Headings, entries and fences are :mod:`memstrata.agent.markdown_doc`'s reading, the one
the tools edit by, so the cut keeps as a heading exactly what the tools take for one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from memstrata.agent import markdown_doc
from memstrata.agent.markdown_doc import Kind

# "<" of a tag that opens or closes a file section, in any case and spacing a model might
# still read as one: "<file", "</file", "< /FILE". "&lt;" reads as "<" to a model and to a
# person, and cannot end the section; other "<" (HTML, generics, "<filename>") stay.
_FILE_TAG_START = re.compile(r"<(?=[ \t]*/?[ \t]*file\b)", re.IGNORECASE)


def escape_framing(text: str) -> str:
    """``text`` with the ``<`` of every ``<file`` / ``</file`` tag written ``&lt;``."""
    return _FILE_TAG_START.sub("&lt;", text)


def open_fence(text: str) -> str | None:
    """The fence (``` or ~~~, at its length) still open at the end of ``text``, or None."""
    return markdown_doc.open_fence(text)


def close_fence(text: str) -> str:
    """``text``, with a closing fence line added if it ends inside a fenced code block:
    indented into the entry for a block inside one (``markdown_doc.closing_line``)."""
    line = markdown_doc.closing_line(text)
    return text if line is None else f"{text}\n{line}"


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
    return [
        Piece(doc.lines[start:end], entry, rank)
        for start, end, entry, rank in zip(starts, ends, kinds, ranks, strict=True)
    ]


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
