"""Section-level edits of a memory file, as plain functions over its text.

A *section* is a level-2 heading line (``## Decisions``) and every line after it up to
the next level-1 or level-2 heading; deeper headings (``###``) belong to the section.
Headings inside fenced code blocks do not count. Names compare case-insensitively,
ignoring surrounding whitespace and closing ``#`` characters. A missing section is
appended at the end of the file, after one blank line.

These functions never fail on odd input: whatever the file holds, the result is the same
file with one section changed. The tools validate arguments before calling them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)")


@dataclass(frozen=True)
class Span:
    heading: int  # index of the "## name" line
    body_start: int  # first body line
    end: int  # one past the last body line (next heading, or len(lines))


def normalise_name(name: str) -> str:
    return name.strip().lstrip("#").strip().rstrip("#").strip().casefold()


def _headings(lines: list[str]) -> list[tuple[int, int, str]]:
    """(index, level, name) of every heading outside fenced code blocks."""
    found: list[tuple[int, int, str]] = []
    fenced = False
    for index, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match is not None:
            found.append((index, len(match.group(1)), match.group(2)))
    return found


def find_section(lines: list[str], name: str) -> Span | None:
    """The first level-2 section called ``name``, or None."""
    wanted = normalise_name(name)
    headings = _headings(lines)
    for position, (index, level, title) in enumerate(headings):
        if level == 2 and normalise_name(title) == wanted:
            end = next((i for i, lvl, _ in headings[position + 1 :] if lvl <= 2), len(lines))
            return Span(index, index + 1, end)
    return None


def _with_new_section(text: str, name: str, body: list[str]) -> str:
    head = text.rstrip("\n")
    section = "\n".join([f"## {name.strip()}", *body]) + "\n"
    return f"{head}\n\n{section}" if head else section


def append_to_section(text: str, name: str, entry: str) -> str:
    """Add ``entry`` after the last non-blank line of section ``name``."""
    lines = text.split("\n")
    entry_lines = entry.split("\n")
    span = find_section(lines, name)
    if span is None:
        return _with_new_section(text, name, entry_lines)
    position = span.end
    while position > span.body_start and lines[position - 1].strip() == "":
        position -= 1
    return "\n".join(lines[:position] + entry_lines + lines[position:])


def replace_section(text: str, name: str, body: str) -> str:
    """Replace the body of section ``name`` (the heading stays); empty ``body`` clears it."""
    lines = text.split("\n")
    body_lines = body.strip("\n").split("\n") if body.strip() else []
    span = find_section(lines, name)
    if span is None:
        return _with_new_section(text, name, body_lines)
    # A blank line keeps the next heading apart; at the end of the file it is the final
    # newline.
    tail = lines[span.end :]
    return "\n".join([*lines[: span.body_start], *body_lines, "", *tail])


def set_key(text: str, name: str, key: str, value: str) -> str:
    """Set ``- key: value`` in section ``name``: the first bullet with that key (any
    case, optional bold) keeps its bullet and spelling and gets the new value; with no
    such bullet one is appended to the section (created if missing)."""
    lines = text.split("\n")
    pattern = re.compile(
        rf"^(\s*[-*+]\s+(?:\*\*)?{re.escape(key.strip())}(?:\*\*)?\s*:)", re.IGNORECASE
    )
    span = find_section(lines, name)
    if span is not None:
        for index in range(span.body_start, span.end):
            match = pattern.match(lines[index])
            if match is not None:
                lines[index] = f"{match.group(1)} {value}".rstrip()
                return "\n".join(lines)
    return append_to_section(text, name, f"- {key.strip()}: {value}".rstrip())


def dated_bullet(content: str, day: date) -> str:
    """``- 2026-03-01: first line`` with later lines indented under it (blank ones dropped)."""
    lines = [line.rstrip() for line in content.strip().split("\n")]
    rest = [f"  {line.strip()}" for line in lines[1:] if line.strip()]
    return "\n".join([f"- {day.isoformat()}: {lines[0]}", *rest])
