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
where a file was cut: the truncation marker sits inside the section it belongs to.

Budget: ``floor(ratio × token_limit)`` tokens (spec: 15%) for the whole text, headers and
marker included. Priority, highest first: AGENTS > SOUL > USER > MEMORY. Sections are
added whole while they fit. The first one that does not fit is cut to the longest prefix
that still fits with its marker (``…[truncated: USER.md, N of M tokens shown]``, N and M
counted on that file's text alone); every lower section is dropped, so a lower file never
appears while a higher one is incomplete. A file that cannot show even one character is
dropped rather than truncated. Empty (or whitespace-only) files are left out and reported
nowhere. Content is stripped of a leading byte-order mark and of surrounding whitespace.

The prefix is found by binary search over character positions, each moved back to the
last grapheme-cluster boundary (``memstrata.text.grapheme_cut``), calling ``count`` on the
full assembled text each time, then moved back to the last line break when that keeps at
least half of it. Only positions that were counted and fit are ever used, so the result
never exceeds the budget even for a counter that is not monotone; for a monotone counter
(a prefix never counts more than the whole) the binary-searched prefix is the longest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import regex

from memstrata.config import PROMPT_BUDGET_RATIO
from memstrata.errors import InvalidContentError
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
    kept: list[str] = []
    truncated: list[str] = []
    dropped: list[str] = []
    sections = (
        ("AGENTS.md", agents_md),
        ("SOUL.md", soul),
        ("USER.md", user),
        ("MEMORY.md", memory),
    )
    for name, raw in sections:
        # str.strip() keeps a byte-order mark (no whitespace to it), which a file saved
        # by a Windows editor starts with; the model has no use for it.
        content = raw.removeprefix("\ufeff").strip()
        if not content:
            continue
        if truncated or dropped:
            dropped.append(name)
            continue
        whole = _section(name, content)
        if count(SECTION_SEPARATOR.join([*kept, whole])) <= budget:
            kept.append(whole)
            continue
        cut = _truncated_section(name, content, kept, budget, count)
        if cut is None:
            dropped.append(name)
        else:
            kept.append(cut)
            truncated.append(name)
    text = SECTION_SEPARATOR.join(kept)
    return PromptResult(
        text=text,
        tokens=count(text),
        budget=budget,
        truncated=tuple(truncated),
        dropped=tuple(dropped),
    )


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


def _truncated_section(
    name: str, content: str, kept: Sequence[str], budget: int, count: Callable[[str], int]
) -> str | None:
    total = count(content)
    first = _first_cluster_end(content)

    def shown(length: int) -> str:
        # Cut between grapheme clusters: a flag, an accent or a conjunct split in two
        # shows as another character. The cut only moves back, and monotonically, so
        # ``fits`` stays true-then-false for the binary search. grapheme_cut keeps a cut
        # with no boundary before it, so a cut inside the first cluster is made empty here.
        return content[: grapheme_cut(content, length) if length >= first else 0].rstrip()

    def section(length: int) -> str:
        text = shown(length)
        marker = f"…[truncated: {name}, {count(text)} of {total} tokens shown]"
        return _section(name, f"{text}\n{marker}")

    def fits(length: int) -> bool:
        return count(SECTION_SEPARATOR.join([*kept, section(length)])) <= budget

    length = largest_fitting(len(content) - 1, fits)
    # A cut mid-line leaves half a sentence; the last line break is nicer when it is close.
    line_end = content.rfind("\n", 0, length + 1)
    if line_end >= max(1, length // 2) and line_end != length and fits(line_end):
        length = line_end
    if not shown(length).strip():
        return None
    return section(length)


def _first_cluster_end(text: str) -> int:
    match = _CLUSTER.match(text)
    return 0 if match is None else match.end()
