"""MEMORY.md's entries, as plain functions over the parsed file: which bullet ``record_memory``'s
``replaces`` names, and whether a section already holds an entry.

An *entry* is a top-level list item (``- 2026-03-01: text``) outside fenced code blocks,
with the lines of its paragraph and the lines indented under it
(:func:`~memstrata.agent.sections.dated_bullet` writes later lines so), as
:mod:`memstrata.agent.markdown_doc` reads them for the prompt's cut too. Entries compare
by :func:`comparable`: folded as section names are (NFKC, case-folded), whitespace
collapsed, without the item marker and without a leading ``YYYY-MM-DD:`` date, so a retry
on another day is the same entry and an agent may quote an entry with or without its date.
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

    @cached_property
    def key(self) -> str:
        """Its text as entries compare (:func:`comparable`)."""
        return comparable(self.text)

    def within(self, span: Section) -> bool:
        return span.body_start <= self.start < span.end


def comparable(text: str) -> str:
    """``text`` as entries compare: folded, whitespace collapsed, no item marker, no date."""
    words = " ".join(fold(text).split())
    words = item if (item := markdown_doc.item_text(words)) is not None else words
    return _DATED.sub("", words, count=1) if _DATED.match(words) else words


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
    return Entry(
        block.start, block.end, dated.group(1) if dated else None, text, first.strip(), section
    )


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
