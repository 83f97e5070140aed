"""The read-back rule as one pure function: what to do with a sandbox copy of a memory file.

:func:`decide` looks at three texts — the sandbox file, the DB row, and the *base* (the DB
copy the sandbox file last matched) — and returns one action. It does no I/O; the executor
(:mod:`memstrata.sandbox.reconcile`) carries the action out and, when a write loses a race,
reads the DB again and asks :func:`decide` again. The rows of the rule table
(docs/ARCHITECTURE.md, "Read-back rule" and "Conflict policy") in order:

1. sandbox missing or blank → :class:`Push` the DB copy (``restore``); no DB row → nothing;
2. sandbox equals the DB → :class:`Nothing` (a forced push still :class:`Push`-es);
3. sandbox equals its base, or a copy its base record says memstrata wrote to the file
   before it (:attr:`SyncBase.older`) → the sandbox lags behind the DB → :class:`Push`;
4. no DB row → :class:`WriteBack` at version 0 (insert);
5. no base → :class:`WriteBack` at the current version (the spec's plain sandbox-first
   rule) — or, when the DB copy is authoritative (a frontend edit being pushed), :class:`Push`.
   When memstrata knows the version it last left the file at (``pushed``: the agent
   removed or garbled the base record, :func:`trusted`), only over that version; over a
   newer one (or a frontend edit's) the sandbox text is kept aside, :class:`Preserve`;
6. the DB has not moved since the base → :class:`WriteBack` at the base version;
7. the DB moved since the base → line-based three-way merge: clean → :class:`Merge`
   (stored at the current version, then pushed); conflicting → :class:`Preserve` (the DB
   copy, a human's edit, wins; the sandbox copy is kept aside). A base with ``older``
   copies (pushed since the sandbox's last write-back: a push may have failed, or the
   agent may have read a copy before a later push landed) leaves unknown which copy the
   sandbox edited: it is merged from the newest copy whose changes the sandbox text has
   (:func:`edited_from`), so no pushed copy's changes are written over. Merged from an
   older copy, the merge's append rule is off: lines appended by a push the sandbox text
   lacks and lines the sandbox added at the end are then as likely one block (the
   agent changed a pushed line) as two entries (a copy read before the push, plus a
   line) — a conflict, never both blocks stored.

No action discards a side's text: rows 1-3 lose nothing the DB lacks (an ``older`` copy
was settled when its push was decided: stored, kept aside or deliberately replaced), 4-6
write the sandbox edit over a DB copy it was based on (or over any copy, when no base
exists and memstrata knows of no version it pushed, as the spec says), 7 keeps both edits
or both copies.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Protocol

from memstrata.sandbox.merge import merge3


@dataclass(frozen=True)
class SyncBase:
    """The DB copy a sandbox file was last known to match: its version and content.

    ``older``: the other copies memstrata wrote to the file since the sandbox's last
    write-back, oldest first (:func:`memstrata.sandbox.push.records`; at most
    ``push.MAX_OLDER_COPIES``, and while a push lands also the copy the file holds). The
    sandbox may still hold one of them (a push's file write failed), or the agent may be
    working from one (it read the file before a later push): found as it is, such a copy
    is a stale copy memstrata knew about, never an edit, and an edit of it is merged from
    it (:func:`edited_from`). Empty after a write-back, and in records of releases that
    predate the copies (:mod:`memstrata.sandbox.state` reads their ``previous`` and
    ``replacing``).
    """

    version: int
    content: str
    older: tuple[str, ...] = ()

    @property
    def previous(self) -> str | None:
        """The oldest of the ``older`` copies, if any."""
        return self.older[0] if self.older else None


class Stored(Protocol):
    """A DB row as the rule sees it (``MemoryFile``, ``SyncBase``)."""

    @property
    def version(self) -> int: ...
    @property
    def content(self) -> str: ...


@dataclass(frozen=True)
class Nothing:
    """Sandbox and DB agree."""


@dataclass(frozen=True)
class Push:
    """Write the DB copy to the sandbox; ``restore``: the sandbox copy was missing or blank."""

    restore: bool = False


@dataclass(frozen=True)
class WriteBack:
    """Store the sandbox text if the DB is still at ``expected`` (0: no row yet)."""

    content: str
    expected: int


@dataclass(frozen=True)
class Merge:
    """Store the merge of both edits if the DB is still at ``expected``, then push it."""

    content: str
    expected: int


@dataclass(frozen=True)
class Preserve:
    """The DB copy wins a conflict: keep the sandbox text aside, then push the DB copy;
    ``reason``: why, when it is not that both sides edited the same lines."""

    reason: str | None = None


Action = Nothing | Push | WriteBack | Merge | Preserve

UNKNOWN_BASE = (
    "the sandbox's base record is missing, unreadable or not one memstrata wrote, and the "
    "DB holds a version the copy was not pushed from"
)


# Characters that show nothing on their own and that ``str.strip`` keeps: format characters
# (the byte-order mark, zero-width and bidi marks — an RTL editor leaves LRM, RLM or ALM
# behind in a file it empties —, the soft hyphen) and marks with no letter to sit on
# (variation selectors, combining accents). A list of characters missed some of them, and
# a file holding only those then replaced the user's whole DB copy.
_INVISIBLE_CATEGORIES = frozenset({"Cf", "Mn", "Me"})


def has_content(text: str | None) -> bool:
    """Whether ``text`` holds anything visible: a file of whitespace and invisible
    characters (above) was emptied, not written, and never empties the DB copy."""
    return text is not None and not all(
        c.isspace() or unicodedata.category(c) in _INVISIBLE_CATEGORIES for c in text
    )


def edited_from(sandbox_text: str, base: SyncBase) -> str:
    """The copy a sandbox edit started from: the newest of the base's copies (``older``,
    then ``content``) whose changes over every copy before it the sandbox text has — it
    holds every line the later copy added and none it removed —, else the oldest. So a
    merge never takes a push's changes for the agent undoing them (a whole-file write
    composed from a read made before the push): an edit of any copy the record names is
    merged from that copy. Lines are compared without their CR and in NFC: a copy re-saved
    with CR LF or in NFD still has the push's lines."""
    copies = (*base.older, base.content)
    lines = _line_set(sandbox_text)
    sets = [_line_set(copy) for copy in copies]
    for newer in range(len(copies) - 1, 0, -1):
        if all(_has_changes(lines, sets[older], sets[newer]) for older in range(newer)):
            return copies[newer]
    return copies[0]


def _has_changes(lines: set[str], older: set[str], newer: set[str]) -> bool:
    """Whether ``lines`` hold what ``newer`` changed in ``older``."""
    return newer - older <= lines and not (older - newer) & lines


def _line_set(text: str) -> set[str]:
    return {unicodedata.normalize("NFC", line.removesuffix("\r")) for line in text.split("\n")}


def trusted(record: SyncBase | None, db: Stored | None, pushed: int | None) -> SyncBase | None:
    """``record`` (a base record read from the sandbox), unless it contradicts the version
    memstrata last left the file at (``pushed``: none older than it, none newer than the
    DB): the agent can write the record, and one it garbled or put back is no base."""
    if record is None or pushed is None or db is None:
        return record
    return record if pushed <= record.version <= db.version else None


def decide(
    sandbox_text: str | None,
    db: Stored | None,
    base: SyncBase | None,
    *,
    db_authoritative: bool = False,
    pushed: int | None = None,
) -> Action:
    """The action for one file (module doc). ``db_authoritative``: the DB copy was just
    written by a human (a frontend edit), so without a base the sandbox text is not an edit
    to keep but a stale copy to replace. ``pushed``: the DB version memstrata last left the
    sandbox file at, when it knows (:mod:`memstrata.sandbox.synced`): without a base, the
    sandbox text is written only over that version, and kept aside over any other."""
    if not has_content(sandbox_text):
        return Nothing() if db is None else Push(restore=True)
    assert sandbox_text is not None
    if db is None:
        return WriteBack(sandbox_text, 0)
    if sandbox_text == db.content:
        return Push() if db_authoritative else Nothing()
    if base is None and pushed is not None:
        if db.version == pushed and not db_authoritative:
            return WriteBack(sandbox_text, db.version)
        return Preserve(UNKNOWN_BASE)
    if base is not None and sandbox_text in (base.content, *base.older):
        return Push()
    if base is None:
        return Push() if db_authoritative else WriteBack(sandbox_text, db.version)
    origin = edited_from(sandbox_text, base)
    if origin == base.content and (base.version, base.content) == (db.version, db.content):
        return WriteBack(sandbox_text, db.version)
    # Merged from a copy a push replaced: the sandbox lacks that push's lines, so a block the
    # push appended and the agent changed looks like two appends (module doc, row 7).
    merged = merge3(origin, sandbox_text, db.content, appends=origin == base.content)
    return Preserve() if merged is None else Merge(merged, db.version)
