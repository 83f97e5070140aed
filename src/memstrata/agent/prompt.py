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

A host may lead the text with a ``guide`` of its own (the MCP server's words on its tools,
``mcp.prompt_guide``, in place of AGENTS.md, the rules of the platform's workspace
agents): whole, first, or not at all.

Budget: ``floor(ratio × token_limit)`` tokens (spec: 15%) for the whole text, guide, tags,
markers and note included. Priority, highest first: AGENTS > SOUL > USER > MEMORY.
Sections are added whole while each fits beside the room the files below it need (the
least of the ways they can end: the first of them whole, the rest named by the note, or
within their floors when a host opts in to floors). The first one that does not fit is cut
(below), and the files below it are left out; a file that cannot show even one character
is left out rather than truncated.

Files left out are said in the text, not only in ``PromptResult.dropped``: a line after
the sections names each with its size, ``[left out for lack of room: USER.md (8923
tokens), MEMORY.md (40156 tokens); use memory_search or read the files]``
(``prompt_room.left_out_note``), counted in the budget like the rest. Room for it is left
whenever a file is kept, so it is there in full unless no file fits at all; then in brief,
the names alone, if that fits (``token_limit`` 200: 30 tokens, ``[left out for lack of
room: AGENTS.md, SOUL.md, USER.md, MEMORY.md]``), else the text is empty.

Floors (``floor_share``, ``MEMSTRATA_PROMPT_FLOOR_SHARE``; off by default): the spec cuts
lower-priority memory first, so by default a file below the one cut is left out, and a
USER.md of 9,000 tokens leaves out MEMORY.md and the corrections recorded last in it. A
host may opt in to a departure from that order: with a share above 0 (1/8 is the value
measured), a file below the one cut keeps up to that share of the budget
(``prompt_room.floor_tokens``), taken from the file cut: shown whole if it is smaller,
else cut by its own rule (below) within it, or named by the note if nothing of it fits
there. Not for a floor under ``MIN_FLOOR`` tokens (it would hold little beside a
section's tags and marker), never at AGENTS.md's expense (the platform's rules), and never
leaving the file cut less than a floor of its own; otherwise files below the one cut are
left out, so a lower file shows while a higher one is incomplete only within its floor.

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
of the library's agent tools, and "the whole file" is ``memory_read`` over MCP (its guide
says so) and the workspace file for a sandbox agent (AGENTS.md says so).

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

from memstrata.agent.prompt_body import shown_content
from memstrata.agent.prompt_count import adds_over_lines
from memstrata.agent.prompt_cut import (
    SECTION_SEPARATOR,
    FileCut,
    largest_fitting,
    older_entries,
    truncation_marker,
)
from memstrata.agent.prompt_room import PromptFile, brief_note, floor_tokens, left_out_note
from memstrata.config import PROMPT_BUDGET_RATIO
from memstrata.config_search import MAX_PROMPT_FLOOR_SHARE, PROMPT_FLOOR_SHARE
from memstrata.errors import InvalidContentError
from memstrata.memory.kinds import FileKind

# The cut's parts the callers (and tests) have imported from here.
__all__ = [
    "MAX_TOKEN_LIMIT",
    "MIN_TOKEN_LIMIT",
    "SECTION_SEPARATOR",
    "PromptResult",
    "build_system_prompt",
    "check_token_limit",
    "largest_fitting",
    "older_entries",
    "prompt_budget",
    "truncation_marker",
]

# A model's context window in tokens, as every entry point accepts it (the library's
# open_agent_session and the MCP memory_context prompt): 0 leaves no room for anything,
# and far beyond any model's window is a typo.
MIN_TOKEN_LIMIT = 1
MAX_TOKEN_LIMIT = 10_000_000


@dataclass(frozen=True)
class PromptResult:
    """The assembled text and what the budget did to it."""

    text: str
    tokens: int  # count(text)
    budget: int
    truncated: tuple[str, ...]  # file names cut short (more than one only with floors)
    dropped: tuple[str, ...]  # file names left out for lack of room (the note names them)


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
            f"the model's context window in tokens, e.g. 128000; got {token_limit!r}",
            field="token_limit",
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
    guide: str = "",
    floor_share: float = PROMPT_FLOOR_SHARE,
) -> PromptResult:
    """Assemble AGENTS / SOUL / USER / MEMORY into at most the budget (see module doc),
    after ``guide`` (a host's own words on how it reaches memory) when that fits whole.
    ``floor_share``: 0 (the spec's strict priority order) to ``MAX_PROMPT_FLOOR_SHARE``,
    each file below the one cut keeping up to that share of the budget (module doc,
    "Floors")."""
    budget = prompt_budget(token_limit, ratio)
    if not 0 <= floor_share <= MAX_PROMPT_FLOOR_SHARE:
        raise ValueError(
            f"floor_share must be between 0 and {MAX_PROMPT_FLOOR_SHARE}, got {floor_share}"
        )
    sections = (
        (FileKind.AGENTS, agents_md),
        (FileKind.SOUL, soul),
        (FileKind.USER, user),
        (FileKind.MEMORY, memory),
    )
    files = [
        PromptFile.read(kind, content, budget, count)
        for kind, raw in sections
        if (content := shown_content(raw))
    ]
    floor = floor_tokens(budget, floor_share)
    return _Assembly(budget, count, floor).build(guide.strip(), files)


class _Assembly:
    """The prompt as it is put together: the texts kept so far, in order.

    With a counter that adds over line breaks (``prompt_count``) the text is counted by
    its parts, each once: ``kept_tokens`` is what the kept texts count, joined. Else each
    text tried is counted whole, after the kept ones, as the prompt will be.
    """

    def __init__(self, budget: int, count: Callable[[str], int], floor: int = 0) -> None:
        self.budget = budget
        self.count = count
        self.floor = floor  # each floor, in tokens (0: none, the spec's strict order)
        self.adds = adds_over_lines(count)
        self.kept: list[str] = []
        self.kept_tokens = 0  # with a counter that adds only
        self.truncated: list[str] = []
        self.notes: dict[tuple[FileKind, ...], int] = {}  # note_tokens, by the files named

    def build(self, guide: str, files: Sequence[PromptFile]) -> PromptResult:
        if guide:
            tokens = self.count(guide)
            if self.with_kept([guide], tokens) + self.room_for(files, 0) <= self.budget:
                self.keep(guide, tokens)
        left_out = self.fit(files)
        return self.finish(left_out)

    def with_kept(self, texts: Sequence[str], tokens: int) -> int:
        """What the kept texts and then ``texts`` (which count ``tokens``) count joined."""
        if self.adds:
            return self.kept_tokens + tokens
        return self.count(SECTION_SEPARATOR.join([*self.kept, *texts]))

    def keep(self, text: str, tokens: int) -> None:
        self.kept.append(text)
        self.kept_tokens += tokens

    def room_for(self, files: Sequence[PromptFile], floor: int) -> int:
        """The room to leave ``files`` (those below a file kept whole): the least of the
        ways they can end, each of the first ones whole and the others left out, named
        by the note or, with a ``floor``, within their floors (whole if smaller), which
        hold that note too."""

        def end(whole: int) -> int:
            rest = files[whole:]
            note = self.note_tokens(rest)
            floors = sum(min(floor, f.tokens) for f in rest)
            return sum(f.tokens for f in files[:whole]) + (max(floors, note) if floor else note)

        return min(end(whole) for whole in range(len(files) + 1))

    def note_tokens(self, files: Sequence[PromptFile]) -> int:
        if not files:
            return 0
        names = tuple(f.kind for f in files)
        if names not in self.notes:
            self.notes[names] = self.count(left_out_note(files))
        return self.notes[names]

    def fit(self, files: Sequence[PromptFile]) -> list[PromptFile]:
        """Keep ``files`` whole in priority order while each fits beside the room the files
        below it need; cut the first that does not (:meth:`cut`). The files left out."""
        for index, file in enumerate(files):
            rest = files[index + 1 :]
            # AGENTS.md, the platform's rules, is never cut to make room for a floor.
            floor = 0 if file.kind is FileKind.AGENTS else self.floor
            needed = self.room_for(rest, floor)
            if self.with_kept([file.whole], file.tokens) + needed <= self.budget:
                self.keep(file.whole, file.tokens)
                continue
            return self.cut(file, rest, floor)
        return []

    def cut(self, file: PromptFile, rest: Sequence[PromptFile], floor: int) -> list[PromptFile]:
        """Cut ``file`` to what is left beside the floors of ``rest`` (each file shown
        within its floor) and the note naming those that show nothing; without floors if
        they would leave ``file`` less than one, or nothing of it fits beside them. The
        files left out."""
        lower, left_out = self.floors(rest, floor)
        if lower and not self.leaves_a_floor(lower, left_out, min(floor, file.tokens)):
            lower, left_out = [], list(rest)
        shown = self.cut_section(file, lower, left_out)
        if shown is None and lower:
            lower, left_out = [], list(rest)
            shown = self.cut_section(file, lower, left_out)
        if shown is None:
            left_out.insert(0, file)
        else:
            self.keep(shown, self.count(shown))
            self.truncated.append(file.kind.filename)
        for lower_file, text, tokens in lower:
            self.keep(text, tokens)
            if text != lower_file.whole:
                self.truncated.append(lower_file.kind.filename)
        return left_out

    def floors(
        self, files: Sequence[PromptFile], floor: int
    ) -> tuple[list[tuple[PromptFile, str, int]], list[PromptFile]]:
        """Each of ``files`` within ``floor`` tokens: whole if it fits, else cut by its own
        rule with that budget; and the files that show nothing within it (all of them
        without a floor)."""
        if not floor:
            return [], list(files)
        shown: list[tuple[PromptFile, str, int]] = []
        left_out: list[PromptFile] = []
        for file in files:
            text = file.whole if file.tokens <= floor else _cut_alone(file, floor, self.count)
            if text is None:
                left_out.append(file)
            else:
                shown.append((file, text, file.tokens if text == file.whole else self.count(text)))
        return shown, left_out

    def leaves_a_floor(
        self,
        lower: Sequence[tuple[PromptFile, str, int]],
        left_out: Sequence[PromptFile],
        floor: int,
    ) -> bool:
        """Whether the file being cut keeps ``floor`` tokens (a floor, or its whole size if
        smaller) beside ``lower`` and the note."""
        taken = sum(tokens for _, _, tokens in lower) + self.note_tokens(left_out)
        return self.with_kept([], 0) + taken + floor <= self.budget

    def cut_section(
        self,
        file: PromptFile,
        lower: Sequence[tuple[PromptFile, str, int]],
        left_out: Sequence[PromptFile],
    ) -> str | None:
        """``file`` cut to fit after the kept texts and before ``lower`` and the note."""
        note = left_out_note(left_out)
        after = [text for _, text, _ in lower] + ([note] if note else [])
        after_tokens = sum(tokens for _, _, tokens in lower) + self.note_tokens(left_out)
        kept_tokens = self.kept_tokens + after_tokens if self.adds else None
        cut = FileCut(file, self.kept, self.budget, self.count, kept_tokens, after)
        return cut.end() if file.memory is None else cut.newest_entries(file.memory, file.lines)

    def finish(self, left_out: Sequence[PromptFile]) -> PromptResult:
        """The kept texts and the note on ``left_out`` in full, or brief when the full one
        does not fit (it was left room for, unless no file at all fits), or none."""
        texts = self.kept
        for note in (left_out_note(left_out), brief_note(left_out)) if left_out else ():
            tokens = self.count(note)
            if self.with_kept([note], tokens) <= self.budget:
                texts = [*self.kept, note]
                self.kept_tokens += tokens
                break
        text = SECTION_SEPARATOR.join(texts)
        return PromptResult(
            text=text,
            tokens=self.kept_tokens if self.adds else self.count(text),
            budget=self.budget,
            truncated=tuple(self.truncated),
            dropped=tuple(f.kind.filename for f in left_out),
        )


def _cut_alone(file: PromptFile, budget: int, count: Callable[[str], int]) -> str | None:
    """``file``'s section cut to ``budget`` tokens on its own (a floor)."""
    cut = FileCut(file, (), budget, count, 0 if adds_over_lines(count) else None)
    return cut.end() if file.memory is None else cut.newest_entries(file.memory, file.lines)
