"""MEMORY.md's entries, as plain functions over its lines: which bullet ``record_memory``'s
``replaces`` names, and whether a section already holds an entry.

An *entry* is a bullet at the start of a line (``- 2026-03-01: text``) outside fenced code
blocks, with the indented lines under it (:func:`~memstrata.agent.sections.dated_bullet`
writes later lines so). Entries compare by :func:`comparable`: folded as section names are
(NFKC, case-folded), whitespace collapsed, without the bullet and without a leading
``YYYY-MM-DD:`` date, so a retry on another day is the same entry and an agent may quote
an entry with or without its date.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

from memstrata.agent import sections
from memstrata.agent.sections import Span, fold

_BULLET = re.compile(r"[-*+][ \t]+")
_DATED = re.compile(rf"({sections.DATE_PATTERN}):[ \t]*")
_WORD = re.compile(r"\w+")
MAX_NEAR = 3  # near matches an answer lists


@dataclass(frozen=True)
class Entry:
    start: int  # the bullet's line
    end: int  # one past its last line
    date: str | None  # the YYYY-MM-DD it starts with
    text: str  # its lines joined by spaces, without bullet and date
    first_line: str  # its first line without the bullet, as written (date included)
    section: str | None  # the level-2 section it is under, as the file spells it

    @cached_property
    def key(self) -> str:
        """Its text as entries compare (:func:`comparable`)."""
        return comparable(self.text)

    def within(self, span: Span) -> bool:
        return span.body_start <= self.start < span.end


def comparable(text: str) -> str:
    """``text`` as entries compare: folded, whitespace collapsed, no bullet, no date."""
    words = " ".join(fold(text).split())
    words = _BULLET.sub("", words, count=1) if _BULLET.match(words) else words
    return _DATED.sub("", words, count=1) if _DATED.match(words) else words


def entries(lines: Sequence[str]) -> list[Entry]:
    """Every entry of a file split into lines, in file order."""
    found: list[Entry] = []
    start: int | None = None
    section: str | None = None
    fenced = False

    def close(end: int) -> None:
        nonlocal start
        if start is not None:
            found.append(_entry(lines, start, end, section))
        start = None

    for index, raw in enumerate(lines):
        line = raw.rstrip("\r")
        indented = line[:1] in (" ", "\t") and line.strip() != ""
        if sections.is_fence(line):
            fenced = not fenced
        if indented and start is not None:
            continue  # a later line of the entry, a fence in it included
        close(index)
        if fenced:
            continue
        title = sections.heading(line.removeprefix("\ufeff") if index == 0 else line)
        if title is not None and title[0] <= 2:
            section = title[1] if title[0] == 2 else None
        elif _BULLET.match(line):
            start = index
    close(len(lines))
    return found


def _entry(lines: Sequence[str], start: int, end: int, section: str | None) -> Entry:
    first = _BULLET.sub("", lines[start].rstrip("\r"), count=1)
    dated = _DATED.match(first)
    rest = [line.strip() for line in lines[start + 1 : end]]
    text = " ".join([first[dated.end() :] if dated else first, *rest])
    return Entry(start, end, dated.group(1) if dated else None, text, first.strip(), section)


def matching(found: Iterable[Entry], wanted: str) -> list[Entry]:
    """The entries ``wanted`` names: those equal to it if any, else those containing it."""
    target = comparable(wanted)
    candidates = list(found)
    equal = [e for e in candidates if e.key == target]
    if equal or not target:
        return equal
    return [e for e in candidates if target in e.key]


def near(found: Iterable[Entry], wanted: str, limit: int = MAX_NEAR) -> list[Entry]:
    """The entries sharing the most words with ``wanted`` (at least one), best first."""
    words = set(_WORD.findall(comparable(wanted)))
    scored = [(len(words & set(_WORD.findall(e.key))), e) for e in found]
    ranked = sorted((pair for pair in scored if pair[0]), key=lambda pair: -pair[0])
    return [entry for _, entry in ranked[:limit]]


def same_entry(found: Iterable[Entry], span: Span | None, bullet: str) -> Entry | None:
    """The entry of section ``span`` that says what ``bullet`` says (dates aside)."""
    if span is None:
        return None
    new = entries(bullet.split("\n"))
    target = comparable(new[0].text) if new else comparable(bullet)
    return next((e for e in found if e.within(span) and e.key == target), None)


def without(lines: Sequence[str], removed: Iterable[Entry]) -> list[str]:
    """``lines`` without the lines of the ``removed`` entries."""
    gone = {i for entry in removed for i in range(entry.start, entry.end)}
    return [line for i, line in enumerate(lines) if i not in gone]
