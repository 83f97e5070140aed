"""MEMORY.md's entries, as plain functions over the parsed file: which bullet ``record_memory``'s
``replaces`` names, and whether a section already holds an entry.

An *entry* is a top-level list item (``- 2026-03-01: text``) outside fenced code blocks,
with the lines of its paragraph and the lines indented under it
(:func:`~memstrata.agent.sections.dated_bullet` writes later lines so), as
:mod:`memstrata.agent.markdown_doc` reads them for the prompt's cut too. Entries compare
by :func:`comparable`: folded as section names are (NFKC, case-folded), whitespace
collapsed, without the item marker and without the ``YYYY-MM-DD:`` dates it starts with,
so a retry on another day is the same entry and an agent may quote an entry with or
without its date. All of them, not the first alone: a typed date ``record_memory`` kept in
the text (:func:`~memstrata.agent.model_markup.entry_date`) follows the entry's own, and
an agent quotes the line as the file shows it (``- 2026-03-01: 2024-05-01: Started the
job``), or without the first date, or without both; each side read by the same rule, every
quote names the entry.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

from memstrata.agent import markdown_doc, sections
from memstrata.agent.markdown_doc import Block, Doc, Kind, Section
from memstrata.agent.sections import fold

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
    lines: int = 1  # how many of its lines are not blank

    @cached_property
    def key(self) -> str:
        """Its text as entries compare (:func:`comparable`)."""
        return comparable(self.text)

    def within(self, span: Section) -> bool:
        return span.body_start <= self.start < span.end


def comparable(text: str) -> str:
    """``text`` as entries compare: folded, whitespace collapsed, no item marker, none of
    the dates it starts with (module doc). Taking off one date first changes nothing, so
    an entry's text without its date (:attr:`Entry.text`) compares as its whole line."""
    rest = entry_syntax(" ".join(fold(text).split()))[1]
    while (dated := _DATED.match(rest)) is not None:
        rest = rest[dated.end() :]
    return rest


def entry_syntax(line: str) -> tuple[str | None, str]:
    """(date, rest) of a line read as an entry's own syntax: a leading list marker
    dropped, then a leading ``YYYY-MM-DD:`` date split off (None without one). The one
    rule for what the tools write themselves: entries compare without it, and
    ``record_memory`` stores a model's text without it (:mod:`memstrata.agent.model_markup`)."""
    text = item if (item := markdown_doc.item_text(line)) is not None else line
    dated = _DATED.match(text)
    return (dated.group(1), text[dated.end() :]) if dated else (None, text)


def entries(doc: Doc) -> list[Entry]:
    """Every entry of a file, in file order."""
    found: list[Entry] = []
    section: str | None = None  # the level-2 heading above, None after a level-1 one
    for block in doc.blocks:
        if block.kind is Kind.HEADING and block.level <= 2:
            section = block.title if block.level == 2 else None
        elif block.kind is Kind.ITEM:
            found.append(_entry(doc, block, section))
    return found


def _entry(doc: Doc, block: Block, section: str | None) -> Entry:
    first = markdown_doc.item_text(doc.bare(block.start)) or ""
    dated = _DATED.match(first)
    rest = [line.strip() for line in doc.lines[block.start + 1 : block.end] if line.strip()]
    text = " ".join([first[dated.end() :] if dated else first, *rest])
    day = dated.group(1) if dated else None
    return Entry(block.start, block.end, day, text, first.strip(), section, 1 + len(rest))


def matching(found: Iterable[Entry], wanted: str) -> list[Entry]:
    """The entries ``wanted`` names: those equal to it if any, else those containing it."""
    target = comparable(wanted)
    candidates = list(found)
    equal = [e for e in candidates if e.key == target]
    if equal or not target:
        return equal
    return [e for e in candidates if target in e.key]


def inner_item(doc: Doc, entry: Entry, wanted: str) -> str | None:
    """The line of a list nested in ``entry`` that ``wanted`` names rather than the entry
    (compared as entries are): the first such line holding it, when the entry's own first
    line does not. Such a line reads as an entry of its own (an agent's bulleted entry was
    stored so, its items nested under the first), but removing the entry removes them all."""
    target = comparable(wanted)
    if not target or target in comparable(entry.first_line):
        return None
    for index in range(entry.start + 1, entry.end):
        line = doc.bare(index).strip()
        if index in doc.code or index in doc.raw or markdown_doc.item_text(line) is None:
            continue
        if target in comparable(line):
            return line
    return None


def near(found: Iterable[Entry], wanted: str, limit: int = MAX_NEAR) -> list[Entry]:
    """The entries sharing the most words with ``wanted`` (at least one), best first."""
    words = set(_WORD.findall(comparable(wanted)))
    scored = [(len(words & set(_WORD.findall(e.key))), e) for e in found]
    ranked = sorted((pair for pair in scored if pair[0]), key=lambda pair: -pair[0])
    return [entry for _, entry in ranked[:limit]]


def same_entry(found: Iterable[Entry], span: Section | None, bullet: str) -> Entry | None:
    """The entry of section ``span`` that says what ``bullet`` says (dates aside)."""
    if span is None:
        return None
    new = entries(markdown_doc.parse(bullet))
    target = comparable(new[0].text) if new else comparable(bullet)
    return next((e for e in found if e.within(span) and e.key == target), None)


def without(lines: Sequence[str], removed: Iterable[Entry]) -> list[str]:
    """``lines`` without the lines of the ``removed`` entries."""
    gone = {i for entry in removed for i in range(entry.start, entry.end)}
    return [line for i, line in enumerate(lines) if i not in gone]
