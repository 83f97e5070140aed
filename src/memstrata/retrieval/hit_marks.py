"""Which stretches of a search hit's text to mark as matching its query, by the BM25 rule
itself: the spans come from ``tokenize``, so a word is marked exactly when the keyword
side could have matched it (NFKC, case folding, Turkish İ, stems, stop words, CJK and
Thai pairs), and no client holds a copy of that rule.

The text is read as the tokenizer reads it, one grapheme cluster at a time
(``agent.preview.as_indexed``: folding changes lengths, so each folded character keeps the
offset of the cluster it came from), and cut into its raw terms (words, CJK characters,
clusters of Thai and the other unspaced scripts). A word is marked when its search term
is one of the query's. A unit of unspaced text is marked when a pair the query has covers
it (``乌龙`` or ``龙茶`` of a query ``乌龙茶``), or when the query has that unit alone,
not paired: Chinese has no stop list, and marking every single character a longer query
shares with a hit (``的``, ``是``) would mark half the text.

Offsets are UTF-16 code units, what a JavaScript string is indexed by: a client slices
the text with them as they are (an emoji before a match counts two).
"""

from __future__ import annotations

import itertools
import re
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from memstrata.agent.preview import as_indexed
from memstrata.retrieval.tokenize import tokenize

__all__ = ["MarkTerms", "hit_marks", "mark_terms", "marks"]

_RUN = re.compile(r"\S+")
_NO_STOPWORDS: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class _Raw:
    """A raw term of the folded text: where it is there, and the code points of the
    original text it came from (``start`` to ``end``)."""

    term: str
    at: int
    start: int
    end: int
    searched: tuple[str, ...]  # its search terms: itself, a stem, none (a stop word)


@dataclass(frozen=True, slots=True)
class _Run:
    """A whitespace-separated run of text as marking reads it."""

    raws: tuple[_Raw, ...]
    # every search term of its raw terms, and every two touching raw terms joined: a run
    # none of whose keys is a query term marks nothing
    keys: frozenset[str]


# Runs of text -> how marking reads them. Reading a run is most of the cost of marking
# (folding it cluster by cluster, tokenizing it and each term), and hits repeat words,
# within a search and across a user's searches; with the run's terms at hand, a run that
# marks nothing (most of them) is passed over with one set lookup. The map is dropped
# whole when full, as ``tokenize``'s own term map is.
_RUNS: dict[str, _Run] = {}
_RUNS_MAX = 20_000


@dataclass(frozen=True)
class MarkTerms:
    """What marks a hit for one query (made once per search, used for every hit)."""

    terms: frozenset[str]  # the query's search terms, as BM25 looks them up
    alone: frozenset[str]  # the search terms of its words and unpaired units


def mark_terms(query: str) -> MarkTerms:
    """The query's terms, and those of its raw terms the tokenizer paired with no
    neighbour (its words, a CJK character searched alone)."""
    terms = frozenset(tokenize(query))
    raws = _raws(query)
    alone: set[str] = set()
    for i, raw in enumerate(raws):
        if not _paired(raws, i, terms):
            alone.update(raw.searched)
    return MarkTerms(terms, frozenset(alone))


def hit_marks(text: str, query: str) -> list[tuple[int, int]]:
    """:func:`marks` of ``text`` for ``query``."""
    return marks(text, mark_terms(query))


def marks(text: str, terms: MarkTerms) -> list[tuple[int, int]]:
    """The ``[start, end)`` stretches of ``text`` to mark, in UTF-16 code units, in
    order; touching ones joined (a marked pair of CJK characters is one mark).

    Read one whitespace-separated run at a time: no term and no pair spans whitespace,
    and NFKC composes nothing across it."""
    wanted = terms.terms
    if not wanted:
        return []
    spans: list[list[int]] = []
    at = 0
    for word in text.split():
        base = text.find(word, at)
        at = base + len(word)
        run = _RUNS.get(word) or _read(word)
        if run.keys.isdisjoint(wanted):  # most runs: a word the query does not have
            continue
        raws = run.raws
        for i, raw in enumerate(raws):
            if terms.alone.isdisjoint(raw.searched) and not _paired(raws, i, wanted):
                continue
            if spans and base + raw.start <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], base + raw.end)
            else:
                spans.append([base + raw.start, base + raw.end])
    return _utf16(text, [(start, end) for start, end in spans])


def _read(text: str) -> _Run:
    """One run of text as marking reads it, remembered."""
    if len(_RUNS) >= _RUNS_MAX:
        _RUNS.clear()
    raws = _raws(text)
    searched = {term for raw in raws for term in raw.searched}
    pairs = {a.term + b.term for a, b in itertools.pairwise(raws) if a.at + len(a.term) == b.at}
    run = _RUNS[text] = _Run(raws, frozenset(searched | pairs))
    return run


def _paired(raws: Sequence[_Raw], i: int, terms: frozenset[str]) -> bool:
    """Whether raw term ``i`` and a neighbour touching it make a pair in ``terms`` (only
    the tokenizer's pairs of unspaced units can: two touching words would be one)."""
    raw = raws[i]
    if i > 0:
        before = raws[i - 1]
        if before.at + len(before.term) == raw.at and before.term + raw.term in terms:
            return True
    if i + 1 < len(raws):
        after = raws[i + 1]
        if raw.at + len(raw.term) == after.at and raw.term + after.term in terms:
            return True
    return False


def _raws(text: str) -> tuple[_Raw, ...]:
    """The raw terms of ``text`` (unstemmed, stop words kept, no pairs) in order, each with
    where it is in the folded text and in ``text``."""
    folded, origin = as_indexed(text)
    size = len(folded)
    found: list[_Raw] = []
    for run in _RUN.finditer(folded):
        at = run.start()
        for piece in tokenize(run.group(), _NO_STOPWORDS, stem=False, cjk_bigrams=False):
            place = folded.find(piece, at, run.end())
            if place < 0:  # not as folded (not known to happen): the run's others count
                continue
            last = place + len(piece) - 1
            # The end of the last character's cluster: the next cluster's start.
            after = last + 1
            while after < size and origin[after] == origin[last]:
                after += 1
            end = origin[after] if after < size else len(text)
            found.append(_Raw(piece, place, origin[place], end, tuple(tokenize(piece))))
            at = place + len(piece)
    return tuple(found)


def _utf16(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Code-point spans of ``text`` as UTF-16 code units: each character outside the
    Basic Multilingual Plane before an offset adds one."""
    if not spans or text.isascii() or max(text) <= "\uffff":
        return spans
    astral = [i for i, c in enumerate(text) if c > "\uffff"]
    return [(s + bisect_left(astral, s), e + bisect_left(astral, e)) for s, e in spans]
