"""What a memory file's text becomes inside the system prompt: pure rules over strings.

* :func:`escape_framing` keeps a file's text from closing its own ``<file>`` section or
  opening another: stored text is whatever the user or a web page said, and a line
  ``</file>\\n<file name="AGENTS.md">`` must not pose as the platform's rules.
* :func:`close_fence` ends a fenced code block left open by a cut, so the marker and the
  close tag after it do not read as code.
* :func:`memory_entries` and :func:`without_oldest` are MEMORY.md's cut: headings stay,
  entries go oldest first (see :func:`drop_order`).

Markdown is read as CommonMark reads it, as far as these rules need: a heading is a line
of one to six ``#`` after at most three spaces, followed by a space, a tab or the line's
end; a fence is three or more backticks or tildes after at most three spaces, closed by a
line of the same character at least as long (``agent.sections`` toggles on any fence line,
which is the same for every fence a tool writes; here the opening fence is needed to close
it). Inside a fence nothing is a heading or starts an entry.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# "<" of a tag that opens or closes a file section, in any case and spacing a model might
# still read as one: "<file", "</file", "< /FILE". "&lt;" reads as "<" to a model and to a
# person, and cannot end the section; other "<" (HTML, generics, "<filename>") stay.
_FILE_TAG_START = re.compile(r"<(?=[ \t]*/?[ \t]*file\b)", re.IGNORECASE)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]|$)")
# An item of a top-level list (at most one space in): "- ", "* ", "+ ", "1. ", "1) ".
# Lines indented further belong to the entry above (``dated_bullet`` indents by two).
_ITEM = re.compile(r"^ ?(?:[-*+]|[0-9]{1,9}[.)])(?:[ \t]|$)")


def escape_framing(text: str) -> str:
    """``text`` with the ``<`` of every ``<file`` / ``</file`` tag written ``&lt;``."""
    return _FILE_TAG_START.sub("&lt;", text)


def open_fence(text: str) -> str | None:
    """The fence (``` or ~~~, at its length) still open at the end of ``text``, or None."""
    fence: str | None = None
    for line in text.split("\n"):
        fence = _after_line(fence, line.rstrip("\r"))
    return fence


def close_fence(text: str) -> str:
    """``text``, with a closing fence line added if it ends inside a fenced code block."""
    fence = open_fence(text)
    return text if fence is None else f"{text}\n{fence}"


def _after_line(fence: str | None, line: str) -> str | None:
    """The open fence after ``line``, given the one open before it."""
    match = _FENCE.match(line)
    if match is None:
        return fence
    marker = match.group(1)
    if fence is None:
        # A backtick fence's info string may not hold a backtick: "```a`b" is no fence.
        return None if marker[0] == "`" and "`" in line[match.end() :] else marker
    closes = marker[0] == fence[0] and len(marker) >= len(fence)
    return None if closes and not line[match.end() :].strip() else fence


@dataclass(frozen=True)
class Piece:
    """Consecutive lines of a file: a heading (kept whole by every cut) or an entry."""

    lines: tuple[str, ...]  # the blank lines before it, then its own
    entry: bool
    rank: int  # entries after this one under the same heading (0: the newest); headings 0


def memory_entries(text: str) -> list[Piece]:
    """``text`` as headings and entries, in order; joined with line breaks they are
    ``text`` again. An entry is an item of a top-level list with the lines under it (up to
    the next item, heading or blank line, and indented lines after a blank line), or a
    paragraph; a fenced block belongs to the entry it starts in, whole; blank lines belong
    to what follows them."""
    pieces: list[list[str]] = []
    kinds: list[bool] = []
    blanks: list[str] = []
    fence: str | None = None
    open_entry = False  # the last piece is an entry that the next line may continue
    for line in text.split("\n"):
        bare = line.rstrip("\r")
        if fence is not None:
            pieces[-1].append(line)
            fence = _after_line(fence, bare)
            continue
        if not bare.strip():
            blanks.append(line)
            open_entry = False
            continue
        heading = _HEADING.match(bare) is not None
        # After a blank line only an indented line continues an entry (a list item's
        # second paragraph); any other starts a new one.
        continues = open_entry or (bool(kinds) and kinds[-1] and bare[:1] in (" ", "\t"))
        if heading or not continues or _ITEM.match(bare) is not None:
            pieces.append([*blanks, line])
            kinds.append(not heading)
        else:
            pieces[-1].extend([*blanks, line])
        blanks = []
        open_entry = not heading
        fence = _after_line(None, bare)
    if blanks:  # trailing blank lines: part of the last piece, so the text stays whole
        if pieces:
            pieces[-1].extend(blanks)
        else:
            pieces.append(blanks)
            kinds.append(False)
    ranks = [0] * len(pieces)
    newer = 0
    for index in range(len(pieces) - 1, -1, -1):
        if kinds[index]:
            ranks[index] = newer
            newer += 1
        else:
            newer = 0
    return [
        Piece(tuple(lines), entry, rank)
        for lines, entry, rank in zip(pieces, kinds, ranks, strict=True)
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
