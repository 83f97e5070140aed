"""How one file is cut to fit (``agent.prompt``, whose module doc gives the rules): the
longest prefix of a file (:meth:`FileCut.end`), MEMORY.md's newest entries
(:meth:`FileCut.newest_entries`), and the marker that ends a cut file."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import regex

from memstrata.agent.prompt_body import Bodies, MemoryBody, without_oldest
from memstrata.agent.prompt_count import LineCounts, MemoryCounts
from memstrata.agent.prompt_room import PromptFile, section
from memstrata.memory.kinds import FileKind
from memstrata.text import grapheme_cut

SECTION_SEPARATOR = "\n\n"

_CLUSTER = regex.compile(r"\X")


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


class FileCut:
    """The ways to cut one file that does not fit whole after the ``kept`` texts and
    before the ``after`` ones (floors and the note, ``prompt._Assembly.cut``).

    Given ``kept_tokens`` (what the kept and the after texts count, with a counter that
    adds over line breaks: ``prompt_count``), a cut tried is counted by its parts: the
    tags, its body, its marker; MEMORY.md's bodies from its lines' or pieces' counts. Else
    each is counted whole, between the kept and the after texts, as the prompt will be.
    """

    def __init__(
        self,
        file: PromptFile,
        kept: Sequence[str],
        budget: int,
        count: Callable[[str], int],
        kept_tokens: int | None = None,
        after: Sequence[str] = (),
    ) -> None:
        self.kind = file.kind
        self.content = file.content
        self.bodies = file.bodies  # ``content``'s, read already (all but MEMORY.md)
        self.lines = file.lines  # the body's lines' counts, if counted already
        self.kept = kept
        self.after = after
        self.budget = budget
        self.count = count
        self.kept_tokens = kept_tokens
        self.total = file.total  # what the whole content's body counts
        self.tags = 0 if kept_tokens is None else count(section(file.kind.filename, ""))

    def framed(self, body: str, left_out: str, body_tokens: int | None = None) -> str:
        """The section of ``body`` (the shown text as ``Bodies.body`` makes it), with its
        marker."""
        shown = self.count(body) if body_tokens is None else body_tokens
        marker = truncation_marker(self.kind, left_out, shown, self.total)
        return section(self.kind.filename, f"{body}\n{marker}")

    def fits(self, cut: str) -> bool:
        texts = [*self.kept, cut, *self.after]
        return self.count(SECTION_SEPARATOR.join(texts)) <= self.budget

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

        def cut_at(shown_entries: int) -> str:
            if shown_entries not in tried:
                dropped = entries - shown_entries
                body = memory.shown(dropped)
                tried[shown_entries] = self.framed(body, older_entries(dropped))
            return tried[shown_entries]

        shown = largest_fitting(entries - 1, lambda n: self.fits(cut_at(n)))
        if shown:
            return cut_at(shown)
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
