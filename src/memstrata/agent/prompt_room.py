"""Who gets the prompt's room (``agent.prompt``): the files as the budget weighs them, the
line that names the files left out, and the floor that keeps one file from crowding out
those below it. Pure rules over counts; the assembly is ``agent.prompt``'s.

* :class:`PromptFile` is one memory file as its section shows it whole, read and counted
  once: what it costs whole, and what its cut needs.
* :func:`left_out_note` is the line after the sections that names each file left out and
  its size: a file the budget could not hold was said nowhere in the text, only in
  ``PromptResult.dropped``, so a model did not know MEMORY.md existed.
  :func:`brief_note` is the same without sizes or advice, for a budget too small for it.
* :func:`floor_tokens` is the room each file below the one being cut keeps, when a host
  opts in (module doc of ``agent.prompt``, "Floors").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from memstrata.agent.prompt_body import Bodies, MemoryBody
from memstrata.agent.prompt_count import LineCounts, adds_over_lines, likely_cut
from memstrata.memory.kinds import FileKind

# Below this a floor holds little but the section's tags and its truncation marker (about
# 55 tokens together), so no file keeps one: at a share of 1/8, a budget under 1,200 tokens
# (a window under 8,000 at 15 %) is cut in priority order only.
MIN_FLOOR = 150


def floor_tokens(budget: int, share: float) -> int:
    """What each file below the one being cut keeps at least (when it is that large):
    ``floor(share × budget)``, ``share`` at its decimal value as the budget's ratio is
    (``prompt.prompt_budget``); 0 when that is too small to show anything (``MIN_FLOOR``),
    as it is for the default share, 0 (the spec's strict order)."""
    floor = math.floor(Fraction(repr(float(share))) * budget)
    return floor if floor >= MIN_FLOOR else 0


def section(name: str, body: str) -> str:
    """A file's section: its body between explicit open and close tags."""
    return f'<file name="{name}">\n{body}\n</file>'


@dataclass(frozen=True)
class PromptFile:
    """One non-empty file, read once: its body as its section shows it whole, what that
    body counts (``total``) and what the whole section does (``tokens``). A cut reads on
    from ``memory`` (MEMORY.md) or ``bodies`` (the others) and ``lines``."""

    kind: FileKind
    content: str  # ``prompt_body.shown_content`` of the file
    body: str
    total: int
    tokens: int
    memory: MemoryBody | None
    bodies: Bodies | None
    lines: LineCounts | None  # the body's lines' counts, when counted line by line

    @classmethod
    def read(
        cls, kind: FileKind, content: str, budget: int, count: Callable[[str], int]
    ) -> PromptFile:
        # MEMORY.md is read once, for its whole text and every cut tried (``MemoryBody``).
        # The other files' text and every cut of it are read by one ``Bodies``.
        memory, bodies = None, None
        if kind is FileKind.MEMORY:
            memory = MemoryBody(content)
            body = memory.shown(0)
        else:
            bodies = Bodies(content)
            body = bodies.body(content)
        # A file far over the budget is counted line by line at once: a cut needs its
        # pieces' or prefixes' counts, which the lines' give without counting it again.
        lines = None
        if adds_over_lines(count) and likely_cut(body, budget):
            lines = LineCounts(body, count)
        total = count(body) if lines is None else lines.whole
        tokens = count(section(kind.filename, "")) + total
        return cls(kind, content, body, total, tokens, memory, bodies, lines)

    @property
    def whole(self) -> str:
        return section(self.kind.filename, self.body)


def left_out_note(files: Sequence[PromptFile]) -> str:
    """The line that ends the prompt when ``files`` were left out for lack of room: each
    file's name and size (its body's tokens, as a truncation marker's total), and how to
    reach them. Empty without files."""
    if not files:
        return ""
    named = ", ".join(f"{f.kind.filename} ({_tokens(f.total)})" for f in files)
    read = "read the whole file" if len(files) == 1 else "read the files"
    how = f"use memory_search or {read}" if any(f.kind.indexed for f in files) else read
    return f"[left out for lack of room: {named}; {how}]"


def brief_note(files: Sequence[PromptFile]) -> str:
    """:func:`left_out_note` at its shortest, the names alone, for a budget too small for
    the note in full (``token_limit`` 200: 30 tokens)."""
    if not files:
        return ""
    return f"[left out for lack of room: {', '.join(f.kind.filename for f in files)}]"


def _tokens(count: int) -> str:
    return f"{count} token" if count == 1 else f"{count} tokens"
