"""What a whole-file rewrite removes from a memory file, and when that is most of it.

``memory_write`` (MCP) replaces a whole file with a model's text. A model that meant to
add a line and sent only that line, or sent nothing, would wipe the file, and no history
undoes it; so the new text is compared with the stored one first, the way the entry tools
read a file:

* a *fact* — a section's ``- key: value`` bullet with a value, its key read as a fact's
  (:func:`~memstrata.agent.wording.is_key`) — by its section and key: a new
  value keeps it, an emptied one removes it. A bullet without a value (a template's
  ``- Name:``) holds no fact and is not counted;
* any other entry (:mod:`memstrata.agent.entries`) by its text as entries compare
  (:func:`~memstrata.agent.entries.comparable`: case, whitespace and a leading date
  aside), so a re-dated entry or one moved to another section stays;
* a level-2 section by its name as sections compare
  (:func:`~memstrata.agent.sections.normalise_name`).

*Most* (:attr:`Removal.most`): more than half of the file's entries, or of its sections,
and at least two of them. Dropping one outdated entry is what a rewrite is for: it is
reported (:func:`said`), not refused. ``update_long_term_memory`` with ``whole_file``
(:class:`~memstrata.agent.edits.ReplaceFile`) reports by the same rule, and a section
replacement (:class:`~memstrata.agent.edits.ReplaceSection`: ``update_long_term_memory``
with ``section``, ``update_user`` without ``key``) is refused by it when it would remove
any entry of the section, in either file, unless ``replace_section`` — or any of its text
outside entries, a paragraph or a subheading (:func:`text_removed`).

A whole-file rewrite weighs the file's text outside entries by that one rule too
(``removal(..., prose=True)``): the paragraphs it lacks are refused unless the caller
says it means it (``memory_write``'s ``replace_all``, ``whole_file`` with
``replace_section``). Nothing else reported them, and a model that rewrote a file as its
entries alone dropped every paragraph a person wrote, its answer saying only "Saved".
A paragraph still equal to one of the file's template — the current one or one the user
was provisioned from before: the indexer's rule (:func:`template_paragraphs`) — is
scaffolding, not prose: it may go unnamed, or every agent rewriting a provisioned
MEMORY.md from scratch was refused the first time for the template's intro alone.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from memstrata.agent import entries, markdown_doc, sections
from memstrata.agent.markdown_doc import Block, Doc, Kind, Section
from memstrata.agent.wording import PREVIEW_CHARS, counted, is_key, listed, quoted
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.retrieval.scaffold import blank_scaffold, scaffold_keys
from memstrata.text import shortened

# What a whole-file refusal says of the paragraphs it names: a model that reworded one
# learns why it is named (an edited paragraph is removed, as an edited entry is).
OUTSIDE_ENTRIES = "text outside its entries (a reworded one counts as removed)"

# An entry's identity: ("fact", section, key) or ("entry", its comparable text).
_Identity = tuple[str, ...]


@dataclass(frozen=True)
class Removal:
    """What the new text lacks of the old one (module doc), in the old file's order."""

    entries: tuple[str, ...]  # the removed entries, quoted as answers quote them
    sections: tuple[str, ...]  # the removed sections' titles, as the old file spells them
    entry_count: int  # the old file's entries (facts and others)
    section_count: int  # the old file's sections
    # The old file's text outside entries the new one lacks (text_removed), as quoted
    # there; weighed only when asked for (prose=True).
    paragraphs: tuple[str, ...] = ()

    @property
    def most(self) -> bool:
        return _most(len(self.entries), self.entry_count) or _most(
            len(self.sections), self.section_count
        )


def removal(old: str, new: str, *, prose: bool = False, scaffold: Collection[str] = ()) -> Removal:
    """What rewriting ``old`` as ``new`` removes (module doc); with ``prose``, its text
    outside entries too (:func:`text_removed` over the whole file), but for the
    paragraphs still equal to one in ``scaffold`` (:func:`template_paragraphs`)."""
    before, after = markdown_doc.parse(old), markdown_doc.parse(new)
    items, kept = _entries(before), set(_entries(after))
    titles = _sections(before)
    kept_titles = set(_sections(after))
    return Removal(
        entries=tuple(quote for identity, quote in items.items() if identity not in kept),
        sections=tuple(title for name, title in titles.items() if name not in kept_titles),
        entry_count=len(items),
        section_count=len(titles),
        paragraphs=text_removed(before, None, new, _scaffold_lines(old, scaffold)) if prose else (),
    )


def template_paragraphs(store: MemoryStore, kind: FileKind) -> frozenset[str]:
    """The paragraphs a rewrite of ``kind`` may drop unnamed: those the indexer leaves out
    as the template's (``FileIndexer.template_paragraphs``: the current template's and
    every earlier one's this deployment provisioned from), for the files whose scaffolding
    it drops (USER.md, MEMORY.md) — one rule, so that a paragraph is either memory or
    scaffolding for both. Without an indexer that knows them, the current template's
    (:func:`~memstrata.retrieval.scaffold.scaffold_keys`). None of SOUL.md's: its template
    is the persona, which a person may have kept as it is on purpose. May read the
    template file and the database."""
    if not kind.indexed:
        return frozenset()
    known = None if store.indexer is None else store.indexer.template_paragraphs(kind)
    if known is not None:
        return frozenset(known)
    try:
        return scaffold_keys(store.templates.load(kind))
    except OSError:  # nothing to tell scaffolding by: every paragraph is guarded
        return frozenset()


def entries_in(doc: Doc, span: Section) -> int:
    """How many entries section ``span`` holds, counted as :func:`removal` counts them."""
    return len(_entries(doc, span))


def text_removed(
    doc: Doc, span: Section | None, body: str, skip: Collection[int] = ()
) -> tuple[str, ...]:
    """The text of section ``span`` outside its entries — a paragraph, a subheading, a code
    block, a quote — that ``body`` (its new body) no longer holds, each quoted by its first
    line. Held means its words, folded and whitespace collapsed as entries compare, appear
    in ``body`` as a run of whole words: a paragraph re-flowed, or turned into an item, is
    kept; one edited is removed (as an edited entry is). Entries are :func:`removal`'s.

    With ``span`` None, the whole file's such text, ``body`` the new file: all but its
    level-1 and level-2 headings, the file's title and sections (:func:`removal` counts
    sections; a title is no content). A block starting on a line in ``skip`` is not
    counted."""
    kept = f" {_flat(body.splitlines())} "
    found: list[str] = []
    for block in doc.blocks:
        if block.kind is Kind.ITEM or not _within(block, span) or block.start in skip:
            continue
        text = _flat(doc.bare(index) for index in range(block.start, block.end))
        if text and f" {text} " not in kept:
            found.append(repr(shortened(doc.bare(block.start).strip(), PREVIEW_CHARS)))
    return tuple(found)


def _scaffold_lines(text: str, scaffold: Collection[str]) -> frozenset[int]:
    """The lines of ``text`` in a paragraph still equal to one in ``scaffold``: those the
    indexer's rule blanks (:func:`~memstrata.retrieval.scaffold.blank_scaffold`)."""
    if not scaffold:
        return frozenset()
    pairs = zip(text.split("\n"), blank_scaffold(text, scaffold).split("\n"), strict=True)
    return frozenset(index for index, (line, kept) in enumerate(pairs) if line != kept)


def _within(block: Block, span: Section | None) -> bool:
    if span is None:
        return block.kind is not Kind.HEADING or block.level > 2
    return span.body_start <= block.start < span.end


def _flat(lines: Iterable[str]) -> str:
    return " ".join(word for line in lines for word in sections.fold(line).split())


def said(removed: Removal) -> str:
    """What a stored rewrite removed, as its answer says it: ``Removed 1 entry ('…'),
    1 section (Work) and 1 paragraph ('…').``, the first ``MAX_LISTED`` of each quoted;
    '' if nothing."""
    parts = []
    if removed.entries:
        count = counted(len(removed.entries), "entry", "entries")
        parts.append(f"{count} ({listed(removed.entries)})")
    if removed.sections:
        count = counted(len(removed.sections), "section", "sections")
        parts.append(f"{count} ({listed(removed.sections)})")
    if removed.paragraphs:
        parts.append(paragraphs(removed.paragraphs))
    return f"Removed {joined(parts)}." if parts else ""


def paragraphs(prose: tuple[str, ...]) -> str:
    """``2 paragraphs ('…', '…')``: text outside entries (:func:`text_removed`) as an
    answer or a refusal names it."""
    return f"{counted(len(prose), 'paragraph')} ({listed(prose)})"


def joined(parts: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join(filter(None, [", ".join(parts[:-1]), parts[-1]])) if parts else ""


def _most(removed: int, total: int) -> bool:
    return removed >= 2 and 2 * removed > total


def _entries(doc: Doc, within: Section | None = None) -> dict[_Identity, str]:
    """Each entry's identity and how an answer quotes it; the first of equal ones. With
    ``within``, those of that section only."""
    facts: dict[int, _Identity | None] = {}  # by the bullet's line; None: no value
    for span in doc.sections():
        name = sections.normalise_name(span.title)
        for index, key, value in sections.key_bullets(doc, span):
            if is_key(key):
                facts[index] = ("fact", name, sections.fold(key)) if value else None
    found: dict[_Identity, str] = {}
    for entry in entries.entries(doc):
        if within is not None and not entry.within(within):
            continue
        identity = facts.get(entry.start, ("entry", entry.key))
        if identity is not None and entry.key and identity not in found:
            found[identity] = quoted(entry)
    return found


def _sections(doc: Doc) -> dict[str, str]:
    """Each section's name as names compare, and its title as the file spells it."""
    found: dict[str, str] = {}
    for title in sections.section_titles(doc):
        found.setdefault(sections.normalise_name(title), title)
    return found
