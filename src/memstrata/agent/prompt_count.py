"""The prompt's token counts from its parts, each counted once, for memstrata's own counter.

``retrieval.tokenize.count_tokens`` adds over line breaks: for all strings ``a`` and ``b``,
``count_tokens(a + "\\n" + b) == count_tokens(a) + count_tokens(b)``, and
``count_tokens("\\n") == 0``. Why, from its patterns:

* ``_PIECE`` counts one token per match. No alternative matches a line break (``\\S``
  does not, and the space alternatives are ``[ \\t]`` only), so no match spans one; the
  only context a match reads beyond itself is the character after it (the end of a run)
  and, for a run of spaces and tabs matched up to its last one, that last one and the
  character after it: lookaheads for ``[ \\t0-9]`` or ``[ \\t]``, which a line break and
  the end of the text both fail. So the matches in ``a`` are those of ``a`` alone, the
  line break gives none, and the scan resumes at the start of ``b`` exactly as it starts
  on ``b`` alone (there is no lookbehind, anchor or ``\\b``).
* The surcharges (``_ONE_MORE``, ``_TWO_MORE``, ``_HALF_MORE``) match single non-ASCII
  code points or runs of one class without a line break in it, with no lookaround; the
  ``isascii`` shortcut only skips them where they find nothing.

So a carriage return, U+2028, a tab or spaces at a line's end, a combining mark or a
joiner at a line's start all count the same on their own line as in the whole text
(``tests/agent/test_prompt_count.py`` checks the property on adversarial alphabets). The
prompt is its sections joined by blank lines, and a section its tag, body, marker and
close tag joined by line breaks, so its count is the sum of its parts' counts. A file cut
is counted line by line once (``LineCounts``), or whole for the fit check and then piece by
piece (``MemoryCounts.by_piece``), not once more per cut the binary search tries; each cut
tried counts only its marker and its last line.

That last line is most of the file when the file is one line (of up to 256 KB), and the
same patterns make a prefix of one line cheap too (``agent.line_prefix`` gives the
reasoning): each pattern's scan of a line resumes where no match spans, and a step of it
reads at most one character past where it resumes; so if a text agrees with the line on
its first ``m`` characters and every scan of the line resumes at ``x <= m - 2``, the text
counts what the line's matches before ``x`` count plus ``count_tokens(text[x:])``. A line
longer than ``_LONG_LINE`` is counted once, in stretches between such positions about
every 1,024 characters, and a prefix ending in it from the last one before its end
(``LineCounts.shown``). A body of such lines is counted line by line at once
(``likely_cut``), which costs about what counting it whole does.

A host's counter (a real tokenizer) need not add: BPE merges across a line break, and
its count of a text is only ever taken on that whole text (``agent.prompt``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property
from itertools import accumulate

from memstrata.agent.line_prefix import EVERY, LinePrefixes
from memstrata.agent.prompt_body import MemoryBody, Shown
from memstrata.retrieval.tokenize import count_tokens

# ASCII letters, the cheapest text but whitespace, are four to a token (``tokenize``): a
# body longer than this many characters per token of the budget seldom fits whole.
_CHARS_PER_TOKEN = 4
# A line longer than this is counted from checkpoints (``line_prefix``), for the prefixes
# the cut tries that end inside it; shorter, its prefixes cost little to count whole.
_LONG_LINE = 4 * EVERY


def adds_over_lines(count: Callable[[str], int]) -> bool:
    """Whether ``count`` is known to add over line breaks (module doc): only memstrata's
    own ``count_tokens``, the function itself, not a wrapper that may change it."""
    return count is count_tokens


def likely_cut(body: str, budget: int) -> bool:
    """Whether ``body`` is long enough that it is worth counting line by line at once,
    for the cut, rather than whole first: only which way the same count is taken. So is
    a body of long lines (one line of 256 KB): counted line by line it costs about what
    counted whole does, and its lines' checkpoints are made once, for the fit and the cut.
    """
    if len(body) > _CHARS_PER_TOKEN * budget:
        return True
    # Lines over ``_LONG_LINE`` characters on average (their breaks counted only then).
    return len(body) > _LONG_LINE and len(body) > _LONG_LINE * (body.count("\n") + 1)


class MemoryCounts:
    """``count(memory.shown(dropped))`` for every ``dropped``: ``shown`` joins the lines of
    the pieces left with line breaks and adds the closing line of a fence or HTML block
    left open, if any, after one more; by the module doc its count is the sum of theirs."""

    def __init__(self, memory: MemoryBody, whole: int, pieces: Sequence[int]) -> None:
        self.whole = whole  # count(memory.shown(0))
        # _gone[k]: what the first k entries of the drop order count.
        self._gone = list(accumulate((pieces[i] for i in memory.order), initial=0))

    @classmethod
    def by_piece(cls, memory: MemoryBody, count: Callable[[str], int]) -> MemoryCounts:
        """From one count per piece (fewer calls than per line, when the whole body has
        been counted already)."""
        pieces = [count("\n".join(piece.lines)) for piece in memory.pieces]
        closing = 0 if memory.closing is None else count(memory.closing)
        return cls(memory, sum(pieces) + closing, pieces)

    def shown(self, dropped: int) -> int:
        return self.whole - self._gone[dropped]


class LineCounts:
    """The count of each line of a section's body, each counted once; their sum is the
    body's count. For MEMORY.md, the pieces' counts follow without counting again; for a
    prefix of the body, its whole lines' counts and a count of its last, partial line,
    from checkpoints on that line if it is long (``line_prefix``)."""

    def __init__(self, body: str, count: Callable[[str], int]) -> None:
        self._count = count
        self._long: dict[int, LinePrefixes] = {}  # the long lines' checkpoints, by index
        lines = body.split("\n")
        if adds_over_lines(count) and max(map(len, lines)) > _LONG_LINE:
            self.lines = [self._line(index, line) for index, line in enumerate(lines)]
        else:
            self.lines = [count(line) for line in lines]
        self.whole = sum(self.lines)

    def _line(self, index: int, line: str) -> int:
        if len(line) <= _LONG_LINE:
            return self._count(line)
        prefixes = self._long[index] = LinePrefixes(line)
        return prefixes.whole

    @cached_property
    def _before(self) -> list[int]:
        """What the first ``k`` lines count, for every ``k``."""
        return list(accumulate(self.lines, initial=0))

    def shown(self, body: Shown) -> int:
        """``count(body.text)`` for a prefix of the body counted (``Bodies.shown``): its
        first ``body.lines`` lines are the body's, then its tail, whose first line starts
        like the body's line after those."""
        prefixes = self._long.get(body.lines)
        if prefixes is None:
            return self._before[body.lines] + self._count(body.tail)
        line, _, rest = body.tail.partition("\n")
        return self._before[body.lines] + prefixes.count(line) + self._count(rest)

    def memory(self, memory: MemoryBody) -> MemoryCounts:
        """The counts of ``memory``'s cuts, this being the count of ``memory.shown(0)``:
        its escaped lines, then the closing line if any (counted in ``whole``)."""
        lines = self.lines
        pieces = [sum(lines[start:end]) for start, end in memory.line_ranges()]
        return MemoryCounts(memory, self.whole, pieces)
