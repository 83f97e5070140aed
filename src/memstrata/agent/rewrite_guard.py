"""Whether a model's rewrite of a whole memory file is stored, and what the answer says:
MCP ``memory_write``'s guard, as plain functions over the new text and the stored one, so
that another transport (REST, the library) can opt in and decide alike.

A person's edit (REST, the settings page) is stored as written; a model writes the text
(the MCP server's instructions tell it to), so what a person may mean but a model most
likely does by mistake is refused (:class:`Refused`, nothing written):

* text that would leave a code fence open, or an HTML block only its end ends (``<!--``
  without ``-->``), as the agent tools' whole-file write does
  (:func:`~memstrata.agent.arguments.check_open_blocks`): everything after it, later
  sections too, would read as code or as part of the block to the agent tools and the
  prompt's cut;
* a blank text, which would wipe the file (a model's empty argument, not a wish: the
  entry tools refuse empty content too), and a text that removes most of the file's
  entries or sections (:mod:`memstrata.agent.removals`) unless ``replace_all`` says the
  model means it — like ``update_user``'s ``replace_section`` and
  ``update_long_term_memory``'s ``whole_file``. A model that meant to add a line and
  sent that line alone would otherwise replace the file with it, and no history undoes
  that. A write that removes fewer is stored (:class:`Store`), and its answer says what it
  removed;
* a text that removes any of the file's text outside entries — a paragraph, a subheading,
  a code block, a quote: the section guard's rule, over the whole file
  (:func:`~memstrata.agent.removals.text_removed`) — unless ``replace_all``: no answer
  named them, and a model rewriting a file as its entries (or SOUL.md as one new line)
  dropped what a person wrote there. A paragraph still equal to one of the template's
  (``scaffold``: :func:`~memstrata.agent.removals.template_paragraphs`, the paragraphs
  the indexer leaves out, an older template's too) is not counted.

A write whose text the file already holds is :class:`NoChange` where the store would
answer it unchanged (:func:`~memstrata.memory.same_text.unchanged_write`, by which a REST
PUT is answered too): on the current version always, on an older one only with
``MEMSTRATA_SAME_TEXT_STALE_VERSION=unchanged``. By default a retry on an older version goes
on to the store, whose conflict tells the model that the file holds its text already (the
first call landed: nothing to do). The removals are weighed only against the version the
write is based on: with another, the write is refused as stale anyway, and the model
re-reads before it writes again.

Two steps, so that a text refused on its own is refused before the stored file is read:
:func:`text_refusal`, then :func:`rewrite_verdict` with the stored file. Both read the
whole text as Markdown (up to 0.5 s of CPU for 256 KB): a server calls them on a worker
thread.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from memstrata.agent.arguments import check_open_blocks, numbered_lines
from memstrata.agent.removals import OUTSIDE_ENTRIES, Removal, joined, paragraphs, removal, said
from memstrata.agent.wording import counted, listed
from memstrata.config_storage import SAME_TEXT_STALE_VERSION, SameTextStaleVersion
from memstrata.errors import ToolInputError
from memstrata.memory.kinds import FileKind
from memstrata.memory.same_text import unchanged_write
from memstrata.memory.store import MemoryFile

# A refusal's code (MCP's structuredContent ``error``): content that leaves a code fence or
# an HTML block open, a blank content, one that would remove most of the file, and one
# that would remove (only) text outside its entries.
UNCLOSED_BLOCK = "unclosed_block"
EMPTY_CONTENT = "empty_content"
WOULD_REMOVE_MOST = "would_remove_most"
WOULD_REMOVE_TEXT = "would_remove_text"

# The targeted tools for each file, as a refusal names them (SOUL.md has none).
_TARGETED = {
    FileKind.MEMORY: "record_memory to add or correct one entry (replaces= names the old one)",
    FileKind.USER: "update_user to set one fact",
    FileKind.SOUL: None,
}


@dataclass(frozen=True)
class Refused:
    """Nothing is written: ``message`` says why and what to send instead; ``data`` holds
    its code (``error``) and, for a write that removes too much, the counts."""

    message: str
    data: dict[str, Any]


@dataclass(frozen=True)
class NoChange:
    """The file already holds the text, at ``version``: nothing to write."""

    kind: FileKind
    version: int

    @property
    def answer(self) -> str:
        return f"No change: {self.kind.filename} already holds this text (version {self.version})."


@dataclass(frozen=True)
class Store:
    """Write the text; ``removed``: what it removes from the version it is based on (None
    when the stored file is another version, or there is none)."""

    kind: FileKind
    removed: Removal | None

    def answer(self, version: int) -> str:
        """The answer once stored as ``version``, with what the write removed: the words
        ``update_long_term_memory``'s whole-file write answers with too."""
        text = said(self.removed) if self.removed is not None else ""
        return f"Saved {self.kind.filename} as version {version}.{f' {text}' if text else ''}"


Verdict = Refused | NoChange | Store


def text_refusal(kind: FileKind, text: str) -> Refused | None:
    """A ``text`` for ``kind`` refused on its own (blank, or a block left open), else None."""
    if not text.strip():
        return Refused(_empty(kind), {"error": EMPTY_CONTENT})
    try:
        check_open_blocks(numbered_lines(text), kind.filename)
    except ToolInputError as exc:
        # A code as the other content refusals have, so a client can tell it from them.
        return Refused(str(exc), {"error": UNCLOSED_BLOCK})
    return None


def rewrite_verdict(
    kind: FileKind,
    text: str,
    stored: MemoryFile | None,
    expected_version: int,
    *,
    replace_all: bool = False,
    scaffold: Collection[str] = (),
    same_text: SameTextStaleVersion = SAME_TEXT_STALE_VERSION,
) -> Verdict:
    """What becomes of rewriting ``stored`` (None: the user has no file yet) as ``text``,
    a write based on ``expected_version``, once :func:`text_refusal` let ``text`` pass
    (module doc); ``scaffold``: the template paragraphs it may drop; ``same_text``: the
    store's ``same_text_stale_version``."""
    if unchanged_write(stored, text, expected_version, same_text):
        assert stored is not None  # it holds the text
        return NoChange(kind, stored.version)
    if stored is None or stored.version != expected_version:
        return Store(kind, None)
    removed = removal(stored.content, text, prose=True, scaffold=scaffold)
    if (removed.most or removed.paragraphs) and not replace_all:
        return Refused(_removing(kind, removed), _counts(removed))
    return Store(kind, removed)


def _empty(kind: FileKind) -> str:
    targeted = _TARGETED[kind]
    return (
        f"content is empty, and memory_write replaces all of {kind.filename} with it; nothing "
        "was written. Send all of the file with your change (memory_read gives the current "
        f"text){f', or use {targeted}' if targeted else ''}; to empty it, send its title "
        "line alone with replace_all=true."
    )


def _removing(kind: FileKind, removed: Removal) -> str:
    """The refusal of a write that removes most of the file, or any of its prose: what it
    would remove (entries and sections only when most), and what to send instead."""
    file, targeted = kind.filename, _TARGETED[kind]
    parts = []
    if removed.most and removed.entries:
        total = counted(removed.entry_count, "entry", "entries")
        parts.append(f"{len(removed.entries)} of the {total} of {file} ({listed(removed.entries)})")
    if removed.most and removed.sections:
        whose = "its" if parts else "the"
        total = counted(removed.section_count, "section", "sections")
        where = "" if parts else f" of {file}"
        parts.append(
            f"{len(removed.sections)} of {whose} {total}{where} ({listed(removed.sections)})"
        )
    if removed.paragraphs and parts:
        parts.append(paragraphs(removed.paragraphs))
    elif removed.paragraphs:
        count, quoted = counted(len(removed.paragraphs), "paragraph"), listed(removed.paragraphs)
        parts.append(f"{count} of {file} ({quoted}), {OUTSIDE_ENTRIES}")
    return (
        f"this would remove {joined(parts)}; nothing was written. memory_write replaces "
        "the whole file: send all of it with your change (memory_read gives the current "
        f"text), {f'use {targeted}, ' if targeted else ''}or pass replace_all=true if you "
        "mean to remove them"
    )


def _counts(removed: Removal) -> dict[str, Any]:
    return {
        "error": WOULD_REMOVE_MOST if removed.most else WOULD_REMOVE_TEXT,
        "entries_removed": len(removed.entries),
        "entries": removed.entry_count,
        "sections_removed": len(removed.sections),
        "sections": removed.section_count,
        "paragraphs_removed": len(removed.paragraphs),
    }
