"""How the memory tools' answers name what a call found, kept or removed: one wording for
the entry tools (:mod:`memstrata.agent.edits`), the whole-file rewrite's report
(:mod:`memstrata.agent.removals`) and MCP ``memory_write``'s guard
(:mod:`memstrata.agent.rewrite_guard`), so that a model reads the same words whichever
tool answered.

A leaf: it reads entries and keys, and imports none of the modules that word answers with it.
"""

from __future__ import annotations

from collections.abc import Sequence

from memstrata.agent import entries, sections
from memstrata.agent.arguments import MAX_NAME_CHARS
from memstrata.text import shortened

MAX_LISTED = 12  # names an answer lists before "…"
PREVIEW_CHARS = 80  # of an entry quoted in an answer


def listed(names: Sequence[str]) -> str:
    """The first ``MAX_LISTED`` of ``names``, with "…" when there are more."""
    return ", ".join(names[:MAX_LISTED]) + (", …" if len(names) > MAX_LISTED else "")


def counted(n: int, one: str, many: str | None = None) -> str:
    """``1 entry``, ``2 entries``: ``many`` is ``one`` + "s" unless given."""
    return f"{n} {one if n == 1 else many or one + 's'}"


def quoted(entry: entries.Entry) -> str:
    """An entry as an answer quotes it: its first line, cut to PREVIEW_CHARS."""
    return repr(shortened(entry.first_line, PREVIEW_CHARS))


def quoted_whole(entry: entries.Entry) -> str:
    """An entry as an answer quotes one it removed: all its lines (cut to twice
    PREVIEW_CHARS), and how many there are when more than one, so that nothing goes
    unnoticed."""
    if entry.lines == 1:
        return quoted(entry)
    whole = f"{entry.date}: {entry.text}" if entry.date else entry.text
    return f"{shortened(whole, 2 * PREVIEW_CHARS)!r} ({entry.lines} lines)"


def is_key(key: str) -> bool:
    """A ``- key: value`` bullet's key as a fact's: ``update_user``'s guard and the
    rewrite's report count only these."""
    # A dated entry or a sentence with a colon is no "- key: value" fact.
    return 0 < len(key) <= MAX_NAME_CHARS and not sections.is_date(key)
