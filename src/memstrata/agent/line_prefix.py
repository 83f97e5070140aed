"""``count_tokens`` of the prefixes of one long line, from checkpoints on the line.

The prompt's cut counts a prefix of a file by its whole lines' counts and a count of its
last, partial line (``prompt_count``). When the file is one long line, that is a count of
up to the whole file per prefix the binary search tries: about 20 of up to 256 KB per
prompt build. Here the line is counted once, in stretches between checkpoints, and a text
that starts like it is counted from the last checkpoint that fits it: the rest is short.

The rule. ``count_tokens`` is the weighted number of matches of its patterns
(``tokenize.COUNTED``; its ASCII shortcut skips only patterns that match nothing there),
each found by a scan from the start of the text: at each position the scan matches and
resumes where the match ends, or resumes one character on. Two facts about the patterns:

1. No pattern looks behind or is anchored, so a scan resumed at position ``x`` of a text
   goes on as the scan of ``text[x:]``.
2. A step of a scan reads the characters from where it starts to where it resumes, and
   at most one more: a run of letters, digits, half-token letters or one-and-a-half-token
   letters, cut in pieces of a fixed length, reads the character after a shorter piece,
   to see the run end; a space or tab reads the character after it, for a digit or
   another space; every other step reads its own character only. A run of spaces and
   tabs is matched up to its last one (which joins the next word) and reads the
   character after that one, to see the run end: one past where its scan resumes. So a
   step that resumes at ``n`` reads nothing past ``n + 1``.

So if texts ``a`` and ``b`` agree on their first ``m`` characters and every scan of ``a``
resumes at ``x``, with ``x <= m - 2`` or ``x == 0``, the steps before ``x`` read only
characters the texts share: every scan of ``b`` resumes at ``x`` after the same matches,
and ``count_tokens(b) == S(x) + count_tokens(b[x:])``, ``S(x)`` being what the matches of
``a`` before ``x`` count. (When ``b`` is a prefix of ``a``, of length ``m``,
``x <= m - 1`` would do: the character past a run of spaces is never a space or tab, and
the end of the text ends the run the same way. When the texts differ at ``m`` it would
not: ``a = "x  y"`` resumes at 2 after 2 tokens, but ``b = "x   "`` counts 2, not
``2 + count_tokens("  ")``. A prefix is escaped where the line is not when it cuts a
``<file`` tag in two, so ``m - 2`` it is.)

Where every scan resumes. Every match longer than one character lies in a run of one class
of ``tokenize.COUNTED_RUNS`` (ASCII letters, digits, the half-token letters, spaces and
tabs, the one-and-a-half-token scripts). So every scan resumes at a *break*, a position
between two characters that are not of one class: no match spans it. Text has one every
few characters. Where there is none in the ``_NEAR`` characters before a checkpoint's
target (inside a long run of one class: 256 KB of ``é``), the positions where every scan
resumes are read from the patterns' matches in the stretch from the checkpoint before (by
the rule, the stretch's scans up to two characters before its end are the line's). A long
run of spaces and tabs has none inside (one match spans it) and is crossed at the next
break.

Checkpoints, every ``every`` characters: a position ``x`` where every scan resumes and
``S(x) = S(x0) + count_tokens(line[x0 : x + 2]) - count_tokens(line[x : x + 2])`` from
the checkpoint ``x0`` before it (the rule, with ``line[x0:]`` and ``line[x0 : x + 2]``):
the line is counted once in all. ``tests/agent/test_line_prefix.py`` checks every prefix
of random and adversarial lines against ``count_tokens``.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from itertools import accumulate

from memstrata.retrieval.tokenize import COUNTED, COUNTED_RUNS, count_tokens

# Characters between checkpoints: a text is counted from at most about this many before
# its end (0.03 to 0.3 µs a character), about 20 times per prompt build. Besides the count
# of its stretch a checkpoint costs next to nothing where the text has breaks (256 KB of
# prose or mixed scripts counted in stretches took no longer than whole), and about 50 µs
# inside a long run of one letter.
EVERY = 1024

# A break is looked for this far back from a checkpoint's target; none there is likely a
# run of one class, read from its matches instead.
_NEAR = 64
# A break (module doc) at a position: not two characters of one class either side of it.
_SAME_CLASS = "|".join(f"(?<=[{chars}])[{chars}]" for chars in COUNTED_RUNS)
# The last break in the span searched, before its end (a break has a character after
# it): ``.*`` runs to the end and backs off one character at a time.
_LAST_BREAK = re.compile(f"(?s:.*)(?!{_SAME_CLASS})(?s:.)")
# The patterns and their weights, each pattern's matches kept by ``split``.
_GROUPED = tuple(
    (re.compile(f"({pattern.pattern})", pattern.flags), weight) for pattern, weight in COUNTED
)


class LinePrefixes:
    """``count_tokens`` of ``line`` (``whole``) and of texts that start like it (module
    doc)."""

    def __init__(self, line: str, every: int = EVERY) -> None:
        self.line = line
        self._at = [0]  # the checkpoints: where every scan of ``line`` resumes, ascending
        self._counts = [0]  # what the matches before each count
        for target in range(every, len(line) - 1, every):
            last = self._at[-1]
            found = _LAST_BREAK.match(line, max(last, target - _NEAR) + 1, target + 1)
            if found is not None:
                at = found.end() - 1
                stretch = count_tokens(line[last : at + 2]) - count_tokens(line[at : at + 2])
            elif target - last <= 2 * every:
                at, stretch = _in_run(line[last : target + 2])
                at += last
            else:  # inside one match since ``last``: a run of spaces (module doc)
                continue
            if at > last:
                self._at.append(at)
                self._counts.append(self._counts[-1] + stretch)
        self.whole = self._counts[-1] + count_tokens(line[self._at[-1] :])

    def count(self, text: str) -> int:
        """``count_tokens(text)``, from the last checkpoint at least two characters before
        where ``text`` first differs from the line."""
        shared = len(text) if self.line.startswith(text) else _shared(self.line, text)
        index = max(bisect_right(self._at, shared - 2) - 1, 0)
        return self._counts[index] + count_tokens(text[self._at[index] :])


def _in_run(stretch: str) -> tuple[int, int]:
    """The last position at most two before the end of ``stretch`` (text from where
    every scan of the line resumes) where every scan of it resumes, and what the matches
    before it count: found from its matches, so also inside a long run of one class."""
    # Each pattern's bounds: the end of the text before its first match, of that match,
    # of the text before the next one..., from its pieces (``split``: no match objects).
    # In ASCII text only the first pattern matches (``tokenize.COUNTED``).
    patterns = _GROUPED[:1] if stretch.isascii() else _GROUPED
    bounds = [list(accumulate(map(len, pattern.split(stretch)))) for pattern, _ in patterns]
    at = len(stretch) - 2
    moved = True
    while moved:  # back to the start of any match ``at`` is inside
        moved = False
        for ends in bounds:
            index = bisect_right(ends, at)
            if index % 2 and ends[index - 1] < at:
                at, moved = ends[index - 1], True
    # Bounds up to ``at``: twice the matches before it, and one more if one starts there.
    counted = zip(patterns, bounds, strict=True)
    return at, sum(weight * (bisect_right(ends, at) // 2) for (_, weight), ends in counted)


def _shared(a: str, b: str) -> int:
    """How many first characters ``a`` and ``b`` have in common."""
    low, high = 0, min(len(a), len(b))
    while low < high:  # a[:low] == b[:low]
        middle = (low + high + 1) // 2
        if a.startswith(b[low:middle], low):
            low = middle
        else:
            high = middle - 1
    return low
