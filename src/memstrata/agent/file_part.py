"""Part of a memory file, as MCP ``memory_read`` reads one: a ``## `` section, or a range
of lines.

A whole read of a long MEMORY.md costs a model the whole file each time (34 KB of one-line
entries: 13,222 tokens by ``count_tokens``; one of its four sections: 3,304); a model that
wants one section, or the lines a refusal named, reads only those. Lines are numbered as
the tools number them in their answers (:func:`~memstrata.agent.arguments.numbered_lines`:
split at LF, from 1), except that a final line break ends the last line rather than
opening an empty one, as an editor counts. A section is found as the entry tools find
one (:func:`~memstrata.agent.sections.find_sections`: its name folded, ``#`` runs aside),
the first of that name as they edit the first; it runs from its heading to the line before
the next level-1 or level-2 heading, without the blank lines it ends in. A range that
runs past the end is cut there (a model sent ``line_count`` from a guess of the length);
one that starts past it is refused with the file's length.

Every refusal is a :class:`PartRefused` with a code, which MCP puts in the result's
``structuredContent`` as ``error``, as it does the codes of ``memory_write``'s refusals
(:mod:`memstrata.agent.rewrite_guard`): a client tells them apart without reading the text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memstrata.agent import markdown_doc, sections
from memstrata.agent.arguments import name_read
from memstrata.agent.wording import counted, listed
from memstrata.errors import ToolInputError
from memstrata.text import refused_id_character

_EITHER = (
    "pass section, or start_line and/or line_count, not both (a section's answer gives "
    "its line numbers, to read part of it by line)"
)

# A refusal's code (MCP's structuredContent ``error``): a section the file lacks, a start
# past its end, a line number below 1, section with a line range, a section name that is
# blank or more than one short line.
SECTION_NOT_FOUND = "section_not_found"
START_PAST_END = "start_line_past_end"
INVALID_RANGE = "invalid_range"
SECTION_WITH_RANGE = "section_with_range"
INVALID_SECTION = "invalid_section"


class PartRefused(ToolInputError):
    """A part that cannot be read: the message says what to send instead, ``code`` which
    refusal it is (module doc)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code

    @property
    def data(self) -> dict[str, Any]:
        """The refusal's structured data, as ``rewrite_guard.Refused.data``: its code."""
        return {"error": self.code}


@dataclass(frozen=True)
class FilePart:
    """Lines ``start`` to ``end`` (from 1, both shown) of a file of ``total_lines`` lines
    and ``total_bytes`` bytes (UTF-8), and the section asked for as the file spells it."""

    text: str
    start: int
    end: int
    total_lines: int
    total_bytes: int
    section: str | None = None
    # The heading lines of later sections of the same name (the tools reach only the first).
    again: tuple[int, ...] = ()

    @property
    def lines(self) -> str:
        """The lines shown, as an answer names them: ``line 3``, ``lines 3-5``."""
        return f"line {self.start}" if self.start == self.end else f"lines {self.start}-{self.end}"

    def rest(self) -> str:
        """How to read what is not shown, as the answer's last line says it ('' if all
        is shown); ``memory_write`` takes the whole file, so the whole read is named."""
        before = _span(1, self.start - 1)
        after = _span(self.end + 1, self.total_lines)
        if not before and not after:
            return ""
        hidden = self.total_lines - (self.end - self.start + 1)
        spans = " and ".join(filter(None, [before, after]))
        how = (
            f"start_line={self.end + 1} reads on"
            if after
            else f"line_count={self.start - 1} reads them"
        )
        again = "".join(f" Another ## {self.section} starts on line {line}." for line in self.again)
        return (
            f"[Not shown: {'line' if hidden == 1 else 'lines'} {spans} of {self.total_lines}. "
            f"memory_read with {how}; without section, start_line and line_count it reads the "
            f"whole file.{again}]"
        )


def _span(first: int, last: int) -> str:
    """Lines ``first`` to ``last`` as ``3`` or ``3-5``; '' for none."""
    return "" if last < first else str(first) if first == last else f"{first}-{last}"


def file_lines(text: str) -> list[str]:
    """``text``'s lines as :func:`file_part` numbers them (module doc)."""
    lines = text.split("\n")
    return lines[:-1] if len(lines) > 1 and lines[-1] == "" else lines


def file_part(
    text: str,
    file: str,
    *,
    section: str | None = None,
    start_line: int | None = None,
    line_count: int | None = None,
) -> FilePart | None:
    """The part of ``text`` (the file ``file``) the arguments name; None when they name
    none (the whole file is read as it always was). A bad argument is a
    :class:`PartRefused` saying what to send instead."""
    if section is None and start_line is None and line_count is None:
        return None
    if section is not None and (start_line is not None or line_count is not None):
        raise PartRefused(_EITHER, SECTION_WITH_RANGE)
    lines = file_lines(text)
    size = len(text.encode("utf-8"))
    if section is not None:
        return _section(text, lines, size, file, _section_name(section))
    first = _at_least_one(start_line, "start_line", "1: the file's first line")
    count = _at_least_one(line_count, "line_count", "the number of lines to read")
    if first > len(lines):
        raise PartRefused(
            f"start_line {first} is past the end of {file}, which has {len(lines)} lines; "
            f"pass a start_line from 1 to {len(lines)}",
            START_PAST_END,
        )
    last = len(lines) if line_count is None else min(len(lines), first + count - 1)
    return FilePart("\n".join(lines[first - 1 : last]), first, last, len(lines), size)


def _at_least_one(value: int | None, what: str, meaning: str) -> int:
    if value is None:
        return 1
    if value < 1:
        raise PartRefused(f"{what} counts from 1 ({meaning}); got {value}", INVALID_RANGE)
    return value


def _section_name(section: str) -> str:
    """``section`` as a read looks a section up (:func:`name_read`: what only a write
    refuses, an invisible character or a long name, is found), its refusal coded."""
    try:
        return name_read(section, "section")
    except ToolInputError as exc:
        raise PartRefused(str(exc), INVALID_SECTION) from exc


def _section(text: str, lines: list[str], size: int, file: str, name: str) -> FilePart:
    doc = markdown_doc.parse(text)
    spans = sections.find_sections(doc, name)
    if not spans:
        titles = sections.section_titles(doc)
        raise PartRefused(_no_section(file, name, titles, len(lines)), SECTION_NOT_FOUND)
    span = spans[0]
    end = min(span.end, len(lines))
    while end > span.heading + 1 and not lines[end - 1].strip():
        end -= 1
    body = "\n".join(lines[span.heading : end])
    again = tuple(other.heading + 1 for other in spans[1:])
    return FilePart(body, span.heading + 1, end, len(lines), size, span.title, again)


def _no_section(file: str, name: str, titles: list[str], total: int) -> str:
    """A section the file lacks: the closest name (as the entry tools' refusal gives
    it, :func:`~memstrata.agent.sections.close_names`) and every section there is. A name
    with a character that shows as nothing or reorders the text is quoted escaped."""
    shown = name if refused_id_character(name) is None else repr(name)[1:-1]
    if not titles:
        return (
            f"{file} has no ## {shown}, nor any other ## section; leave section out to read "
            f"the whole file ({counted(total, 'line')})"
        )
    close = sections.close_names(name, titles)
    guess = f"; did you mean ## {close[0]}?" if close else "."
    return (
        f"{file} has no ## {shown}{guess} Its sections: {listed(titles)}; pass one of them "
        "as section, or leave section out to read the whole file"
    )
