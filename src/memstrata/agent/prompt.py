"""The memory part of the system prompt, fitted to a token budget (spec 4).

Layout: each non-empty file becomes one section, in priority order, sections separated by
one blank line::

    <file name="AGENTS.md">
    …platform rules…
    </file>

    <file name="SOUL.md">
    …
    </file>

Explicit open and close tags keep every file's boundary clear to the model, including
where a file was cut: the truncation marker sits inside the section it belongs to. A
file's text cannot forge a tag: the ``<`` of ``<file`` or ``</file`` in it is written
``&lt;``, and a fenced code block or an HTML comment (any HTML block only its end ends) it
leaves open is closed before the marker and the close tag (``agent.prompt_body``). Content
is stripped of surrounding whitespace and of the byte-order marks among the leading
whitespace (``prompt_body.shown_content``); empty (or whitespace-only) files are left out
and reported nowhere.

Budget: ``floor(ratio × token_limit)`` tokens (spec: 15%) for the whole text, headers and
marker included. Priority, highest first: AGENTS > SOUL > USER > MEMORY. Sections are
added whole while they fit. The first one that does not fit is cut (below) and every lower
section is dropped, so a lower file never appears while a higher one is incomplete; a file
that cannot show even one character is dropped rather than truncated.

What a cut keeps:

* MEMORY.md keeps its headings and the newest entries under each of them: entries are
  written newest last (``record_memory`` appends, the template asks for it), so a prefix
  showed the stalest facts and cut the corrections recorded after them. Entries are left
  out whole and oldest first, from the heading with the most entries still shown
  (``prompt_body.drop_order``); a binary search finds how few can go. The marker says
  ``…[truncated: MEMORY.md, 41 older entries left out, 1503 of 3430 tokens shown; for the
  rest use memory_search or read the whole file]``. When not even the newest entry fits
  beside the headings (or the file has fewer than two entries), the headings and the
  newest entry are cut from the end like the other files, and the marker says "… older
  entries and the end left out".
* AGENTS.md, SOUL.md and USER.md keep the longest prefix: the platform's rules and the
  persona read top down, and USER.md's keys are updated in place, so their order says
  what the template ranks first (name, how to address the user), not how old a fact is.
  The marker: ``…[truncated: USER.md, the end left out, N of M tokens shown; for the rest
  use memory_search or read the whole file]`` (SOUL.md and AGENTS.md are not searched:
  "read the whole file for the rest"). N and M are counted on that file's text alone.

The tool names fit both hosts: ``memory_search`` is the search tool of the MCP server and
of the library's agent tools, and "the whole file" is ``memory_read`` over MCP and the
workspace file for a sandbox agent.

The prefix is found by binary search over character positions, each moved back to the last
grapheme-cluster boundary (``memstrata.text.grapheme_cut``), calling ``count`` on the full
assembled text each time (or, for memstrata's own counter, which adds over line breaks, on
the cut's marker and its body's last line only, the rest counted once: ``prompt_count``; a
cut's body is summed from its lines' or pieces' counts), then moved back to the last line
break when that keeps at least half of it. What a prefix leaves open is read on from a
reading of the lines before it (``prompt_body.Bodies``), so the file is read about once
for all the prefixes tried, not once each. MEMORY.md's entries are whole lines. Only cuts
that were counted and fit are ever used, so the result never exceeds the budget even for a
counter that is not monotone; for a monotone counter (a part never counts more than the
whole) the binary search keeps the most that fits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import regex

from memstrata.agent.prompt_body import (
    Bodies,
    MemoryBody,
    shown_content,
    without_oldest,
)
from memstrata.agent.prompt_count import LineCounts, MemoryCounts, adds_over_lines, likely_cut
from memstrata.config import PROMPT_BUDGET_RATIO
from memstrata.errors import InvalidContentError
from memstrata.memory.kinds import FileKind
from memstrata.text import grapheme_cut

SECTION_SEPARATOR = "\n\n"
# A model's context window in tokens, as every entry point accepts it (the library's
# open_agent_session and the MCP memory_context prompt): 0 leaves no room for anything,
# and far beyond any model's window is a typo.
MIN_TOKEN_LIMIT = 1
MAX_TOKEN_LIMIT = 10_000_000

_CLUSTER = regex.compile(r"\X")


@dataclass(frozen=True)
class PromptResult:
    """The assembled text and what the budget did to it."""

    text: str
    tokens: int  # count(text)
    budget: int
    truncated: tuple[str, ...]  # file names cut short (at most one)
    dropped: tuple[str, ...]  # file names left out for lack of room


def check_token_limit(token_limit: object) -> int:
    """``token_limit`` if it is a whole number from ``MIN_TOKEN_LIMIT`` to
    ``MAX_TOKEN_LIMIT``; else ``InvalidContentError`` (a ValueError) saying so, before a
    library caller's ``"100"`` reaches a comparison."""
    if (
        isinstance(token_limit, bool)
        or not isinstance(token_limit, int)
        or not MIN_TOKEN_LIMIT <= token_limit <= MAX_TOKEN_LIMIT
    ):
        raise InvalidContentError(
            f"token_limit must be a whole number from {MIN_TOKEN_LIMIT} to {MAX_TOKEN_LIMIT}: "
            f"the model's context window in tokens, e.g. 128000; got {token_limit!r}"
        )
    return token_limit


def prompt_budget(token_limit: int, ratio: float = PROMPT_BUDGET_RATIO) -> int:
    """``floor(ratio × token_limit)``, with ``ratio`` taken at its decimal value.

    ``0.15`` as a binary float is slightly below 3/20, so a plain float product would
    give ``floor(0.15 × 20) = 2``; reading the ratio from its shortest repr gives 3.
    """
    check_token_limit(token_limit)
    if not 0 <= ratio <= 1:
        raise ValueError(f"ratio must be between 0 and 1, got {ratio}")
    return math.floor(Fraction(repr(float(ratio))) * token_limit)


def build_system_prompt(
    *,
    agents_md: str,
    soul: str,
    user: str,
    memory: str,
    token_limit: int,
    count: Callable[[str], int],
    ratio: float = PROMPT_BUDGET_RATIO,
) -> PromptResult:
    """Assemble AGENTS / SOUL / USER / MEMORY into at most the budget (see module doc)."""
    budget = prompt_budget(token_limit, ratio)
    # With a counter that adds over line breaks (``prompt_count``) the text is counted by
    # its parts, each once: ``kept_tokens`` is what the kept sections count, joined.
    kept_tokens: int | None = 0 if adds_over_lines(count) else None
    kept: list[str] = []
    truncated: list[str] = []
    dropped: list[str] = []
    sections = (
        (FileKind.AGENTS, agents_md),
        (FileKind.SOUL, soul),
        (FileKind.USER, user),
        (FileKind.MEMORY, memory),
    )
    for kind, raw in sections:
        name = kind.filename
        content = shown_content(raw)
        if not content:
            continue
        if truncated or dropped:
            dropped.append(name)
            continue
        # MEMORY.md is read once, for its whole text and every cut tried (``MemoryBody``).
        # The other files' text and every cut of it are read by one ``Bodies``.
        memory_body, bodies = None, None
        if kind is FileKind.MEMORY:
            memory_body = MemoryBody(content)
            body = memory_body.shown(0)
        else:
            bodies = Bodies(content)
            body = bodies.body(content)
        whole = _section(name, body)
        lines = None  # the body's lines' counts, when counted line by line
        if kept_tokens is None:
            total = None
            fits = count(SECTION_SEPARATOR.join([*kept, whole])) <= budget
        else:
            # A file far over the budget is counted line by line at once: the cut needs
            # its pieces' or prefixes' counts, which the lines' give without counting it
            # again.
            if likely_cut(body, budget):
                lines = LineCounts(body, count)
            total = count(body) if lines is None else lines.whole
            whole_tokens = count(_section(name, "")) + total
            fits = kept_tokens + whole_tokens <= budget
        if fits:
            kept.append(whole)
            kept_tokens = None if kept_tokens is None else kept_tokens + whole_tokens
            continue
        cut = _Cut(kind, content, body, kept, budget, count, kept_tokens, total, bodies, lines)
        section = cut.end() if memory_body is None else cut.newest_entries(memory_body, lines)
        if section is None:
            dropped.append(name)
        else:
            kept.append(section)
            truncated.append(name)
            kept_tokens = None if kept_tokens is None else kept_tokens + count(section)
    text = SECTION_SEPARATOR.join(kept)
    return PromptResult(
        text=text,
        tokens=count(text) if kept_tokens is None else kept_tokens,
        budget=budget,
        truncated=tuple(truncated),
        dropped=tuple(dropped),
    )


def truncation_marker(kind: FileKind, left_out: str, shown: int, total: int) -> str:
    """The line that ends a cut file: what was left out, how much is shown, and how to
    get the rest (module doc)."""
    rest = (
        "for the rest use memory_search or read the whole file"
        if kind.indexed
        else "read the whole file for the rest"
    )
    shown_part = f"{shown} of {total} tokens shown"
    return f"…[truncated: {kind.filename}, {left_out} left out, {shown_part}; {rest}]"


def older_entries(count: int) -> str:
    return f"{count} older {'entry' if count == 1 else 'entries'}"


def largest_fitting(high: int, fits: Callable[[int], bool]) -> int:
    """The largest ``k`` in ``1..high`` with ``fits(k)``, or 0; ``fits`` true then false.

    Binary search: about ``log2(high)`` calls of ``fits``.
    """
    low = 0  # invariant: low == 0 or fits(low)
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def _section(name: str, body: str) -> str:
    return f'<file name="{name}">\n{body}\n</file>'


class _Cut:
    """The ways to cut one file that does not fit whole after the ``kept`` sections.

    Given ``kept_tokens`` (what the kept sections count, with a counter that adds over
    line breaks: ``prompt_count``) and ``total`` (``count(body)``), a cut tried is counted
    by its parts: the tags, its body, its marker; MEMORY.md's bodies from its lines' or
    pieces' counts. Else each is counted whole, after the kept sections, as the prompt
    will be.
    """

    def __init__(
        self,
        kind: FileKind,
        content: str,
        body: str,
        kept: Sequence[str],
        budget: int,
        count: Callable[[str], int],
        kept_tokens: int | None = None,
        total: int | None = None,
        bodies: Bodies | None = None,
        lines: LineCounts | None = None,
    ) -> None:
        self.kind = kind
        self.content = content
        self.bodies = bodies  # ``content``'s, if read already
        self.lines = lines  # ``body``'s lines' counts, if counted already
        self.kept = kept
        self.budget = budget
        self.count = count
        self.kept_tokens = kept_tokens
        self.total = count(body) if total is None else total  # body: the whole content's
        self.tags = 0 if kept_tokens is None else count(_section(kind.filename, ""))

    def framed(self, body: str, left_out: str, body_tokens: int | None = None) -> str:
        """The section of ``body`` (the shown text as ``Bodies.body`` makes it), with its
        marker."""
        shown = self.count(body) if body_tokens is None else body_tokens
        marker = truncation_marker(self.kind, left_out, shown, self.total)
        return _section(self.kind.filename, f"{body}\n{marker}")

    def fits(self, section: str) -> bool:
        return self.count(SECTION_SEPARATOR.join([*self.kept, section])) <= self.budget

    def fits_body(self, body: str, left_out: str) -> bool:
        """Whether the section of ``body`` (``framed``) fits after the kept sections."""
        if self.kept_tokens is None:
            return self.fits(self.framed(body, left_out))
        return self.fits_counted(self.kept_tokens, self.count(body), left_out)

    def fits_counted(self, kept_tokens: int, body_tokens: int, left_out: str) -> bool:
        """``fits_body`` by the parts' counts (class doc), for a body that counts
        ``body_tokens``."""
        marker = truncation_marker(self.kind, left_out, body_tokens, self.total)
        parts = kept_tokens + self.tags + body_tokens + self.count(marker)
        return parts <= self.budget

    def newest_entries(self, memory: MemoryBody, lines: LineCounts | None = None) -> str | None:
        """The headings and as many of the newest entries as fit; when not even the
        newest fits beside the headings (or there are fewer than two entries), those cut
        from the end; None if nothing fits."""
        entries = len(memory.order)
        if entries < 2:
            return self.end()
        if self.kept_tokens is not None:
            counts = (
                MemoryCounts.by_piece(memory, self.count) if lines is None else lines.memory(memory)
            )
            return self.newest_counted(memory, counts, self.kept_tokens)
        tried: dict[int, str] = {}  # the search ends on a count it made: not made twice

        def section(shown_entries: int) -> str:
            if shown_entries not in tried:
                dropped = entries - shown_entries
                body = memory.shown(dropped)
                tried[shown_entries] = self.framed(body, older_entries(dropped))
            return tried[shown_entries]

        shown = largest_fitting(entries - 1, lambda n: self.fits(section(n)))
        if shown:
            return section(shown)
        return self.newest_cut(memory)

    def newest_counted(
        self, memory: MemoryBody, counts: MemoryCounts, kept_tokens: int
    ) -> str | None:
        """``newest_entries`` by the parts' counts: no cut is built until one is chosen."""
        entries = len(memory.order)

        def fits(shown_entries: int) -> bool:
            dropped = entries - shown_entries
            return self.fits_counted(kept_tokens, counts.shown(dropped), older_entries(dropped))

        shown = largest_fitting(entries - 1, fits)
        if shown:
            dropped = entries - shown
            body = memory.shown(dropped)
            return self.framed(body, older_entries(dropped), counts.shown(dropped))
        return self.newest_cut(memory)

    def newest_cut(self, memory: MemoryBody) -> str | None:
        """Not even the newest entry fits: cut it from the end, after the headings."""
        entries = len(memory.order)
        newest = without_oldest(memory.raw, memory.order, entries - 1)
        return self.end(newest, f"{older_entries(entries - 1)} and the end")

    def end(self, text: str | None = None, left_out: str = "the end") -> str | None:
        """The longest prefix of ``text`` (the file) that fits, or None if none does."""
        content = self.content if text is None else text
        bodies = self.bodies if text is None and self.bodies is not None else Bodies(content)
        first = _first_cluster_end(content)

        def shown(length: int) -> str:
            # Cut between grapheme clusters: a flag, an accent or a conjunct split in two
            # shows as another character. The cut only moves back, and monotonically, so
            # ``fits`` stays true-then-false for the binary search. grapheme_cut keeps a
            # cut with no boundary before it, so a cut inside the first cluster is made
            # empty here.
            return content[: grapheme_cut(content, length) if length >= first else 0].rstrip()

        # With a counter that adds over line breaks, a prefix counts what its lines
        # before the last count in the whole text, and its last line (and closing line):
        # the text is counted line by line once, not once per prefix tried, and a long
        # last line from checkpoints on it (``LineCounts.shown``).
        lines = None if self.kept_tokens is None else self._line_counts(bodies, text is None)
        fitted: dict[int, tuple[str, int | None]] = {}  # the last length that fit: its body

        def fits(length: int) -> bool:
            body = bodies.shown(shown(length))
            if lines is None or self.kept_tokens is None:
                tokens = None
                fit = self.fits_body(body.text, left_out)
            else:
                tokens = lines.shown(body)
                fit = self.fits_counted(self.kept_tokens, tokens, left_out)
            if fit:
                fitted.clear()
                fitted[length] = (body.text, tokens)
            return fit

        length = largest_fitting(len(content) - 1, fits)
        # A cut mid-line leaves half a sentence; the last line break is nicer when close.
        line_end = content.rfind("\n", 0, length + 1)
        if line_end >= max(1, length // 2) and line_end != length and fits(line_end):
            length = line_end
        if not shown(length).strip():
            return None
        # The length kept is the last that fit, its body made and counted already.
        body, tokens = fitted.get(length) or (bodies.body(shown(length)), None)
        return self.framed(body, left_out, tokens)

    def _line_counts(self, bodies: Bodies, whole: bool) -> LineCounts:
        """The counts of the lines of the text ``bodies`` escapes: the body's, if counted
        and the text is the whole file (its body is the escaped file's lines and perhaps a
        closing line)."""
        if whole and self.lines is not None:
            return self.lines
        return LineCounts(bodies.escaped, self.count)


def _first_cluster_end(text: str) -> int:
    match = _CLUSTER.match(text)
    return 0 if match is None else match.end()
