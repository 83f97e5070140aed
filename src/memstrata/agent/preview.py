"""What a search hit shows the model: the lines of the hit that hold the query's rarest
terms, within :data:`HIT_PREVIEW_CHARS` (``docs/AGENT_TOOLS.md``, ``memory_search``).

A long-lived user's MEMORY.md chunk is some 25 near-identical bullets ("The user's
colleague Carla1 lives in Riga."). A window around the first query term showed the first
bullet that said "lives", not the one that named Wen21, although the search had found the
right chunk. So a hit longer than the bound shows its lines ranked by the query terms they
hold, each term weighed by how few of the hit's lines hold it (an IDF within the hit): the
line naming Wen21 wins over those that only say "lives". A term is a search term — the
retrieval tokenizer's, stemmed, case-folded and NFKC-normalised, with CJK characters and
their pairs — so a line counts as matching exactly when BM25 would have matched it.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping, Sequence

import regex

from memstrata.retrieval.tokenize import CJK_CHAR, tokenize
from memstrata.text import grapheme_cut

# The preview's bound, in characters, the "…" markers included.
HIT_PREVIEW_CHARS = 400
# Stands for what the preview leaves out: lines between those shown, or the rest of a line.
ELIDED = "…"
# A line is shown when it scores at least this share of the best line: the lines that hold
# the rare terms, not every line that says "lives" (the model pays for each one in tokens).
SHOWN_SHARE = 0.5

_CLUSTER = regex.compile(r"\X")
_NOT_ASCII_WORD = re.compile(r"[^0-9a-z]")
_RUN = re.compile(r"\S+")

# Where each wanted term occurs in a line: term -> start indexes in the line.
Spots = Mapping[str, Sequence[int]]


def preview(text: str, query: str, limit: int = HIT_PREVIEW_CHARS) -> str:
    """``text`` on one line, whitespace collapsed; when longer than ``limit``, its lines
    that best match ``query`` in their order with ``…`` for the lines left out, or, when
    the best line alone is too long, a window of it around its rarest query term. At most
    ``limit`` characters, never cut inside a grapheme cluster."""
    lines = [" ".join(line.split()) for line in text.splitlines()]
    lines = [line for line in lines if line]
    whole = " ".join(lines)
    if len(whole) <= limit:
        return whole
    wanted = frozenset(tokenize(query))
    found = [line_terms(line, wanted) for line in lines]
    weights = rarity(found)
    scores = [sum(weights[term] for term in terms) for terms in found]
    best = max(range(len(lines)), key=lambda i: (scores[i], -i))
    if scores[best] == 0:  # a hit the vectors found: its beginning
        return window(whole, 0, limit, before=False, after=False)
    lengths = [len(line) for line in lines]
    if joined_length([best], lengths) > limit:
        anchor = rarest(term_spots(lines[best], wanted), weights, found)
        last = len(lines) - 1
        return window(lines[best], anchor, limit, before=best > 0, after=best < last)
    return joined(lines, pick(scores, lengths, limit))


def line_terms(line: str, wanted: frozenset[str]) -> dict[str, int]:
    """How often each of the ``wanted`` search terms occurs in ``line``."""
    counts: dict[str, int] = {}
    for term in tokenize(line):
        if term in wanted:
            counts[term] = counts.get(term, 0) + 1
    return counts


def term_spots(line: str, wanted: frozenset[str]) -> dict[str, list[int]]:
    """Where in ``line`` the ``wanted`` search terms begin (term -> indexes in ``line``),
    read as the tokenizer reads text: a stemmed term (``live``) where its word (``lives``)
    begins, a CJK pair where its first character is."""
    folded, origin = as_indexed(line)
    spots: dict[str, list[int]] = {}
    for run in _RUN.finditer(folded):
        at = run.start()
        cjk_before: tuple[str, int] | None = None  # the CJK character just before
        for raw in tokenize(run.group(), frozenset(), stem=False, cjk_bigrams=False):
            found = folded.find(raw, at, run.end())
            if found < 0:  # not as folded (not known to happen): the run's other terms count
                cjk_before = None
                continue
            at = found
            for term in tokenize(raw):  # the raw term's search term: itself, a stem, none
                if term in wanted:
                    spots.setdefault(term, []).append(origin[at])
            if CJK_CHAR.fullmatch(raw) is None:
                cjk_before = None
            else:
                if cjk_before is not None and (pair := cjk_before[0] + raw) in wanted:
                    spots.setdefault(pair, []).append(origin[cjk_before[1]])
                cjk_before = (raw, at)
            at += len(raw)
    return spots


def rarity(found: Sequence[Mapping[str, int]]) -> dict[str, float]:
    """Each term's weight: ``log(1 + lines / lines holding it)``, an IDF over the hit's
    lines, so a term on one line of 25 outweighs one on every line."""
    holding: dict[str, int] = {}
    for terms in found:
        for term in terms:
            holding[term] = holding.get(term, 0) + 1
    return {term: math.log(1 + len(found) / count) for term, count in holding.items()}


def rarest(spots: Spots, weights: Mapping[str, float], found: Sequence[Mapping[str, int]]) -> int:
    """Where in its line the line's rarest term (``spots``: where its terms are) first
    occurs: the heaviest term, then the one with the fewest occurrences in the hit (within
    one line the weights tie), then the longest (a CJK pair before its characters), then
    the earliest; 0 when no term was placed."""
    occurs: dict[str, int] = {}
    for terms in found:
        for term, count in terms.items():
            occurs[term] = occurs.get(term, 0) + count
    placed = [term for term in spots if term in weights]
    if not placed:
        return 0
    term = min(placed, key=lambda t: (-weights[t], occurs.get(t, 0), -len(t), spots[t][0], t))
    return spots[term][0]


def pick(scores: Sequence[float], lengths: Sequence[int], limit: int) -> list[int]:
    """The lines to show, in text order: the best first, then each line scoring at least
    :data:`SHOWN_SHARE` of it, best first, while the joined preview fits ``limit``."""
    best = max(scores)
    shown: list[int] = []
    for i in sorted(range(len(scores)), key=lambda i: (-scores[i], i)):
        if scores[i] <= 0 or scores[i] < SHOWN_SHARE * best:
            break
        trial = sorted([*shown, i])
        if joined_length(trial, lengths) <= limit:
            shown = trial
    return shown


def joined_length(shown: Sequence[int], lengths: Sequence[int]) -> int:
    """The length of :func:`joined` for these lines, without building it."""
    parts = layout(shown, len(lengths))
    return sum(len(ELIDED) if i is None else lengths[i] for i in parts) + len(parts) - 1


def joined(lines: Sequence[str], shown: Sequence[int]) -> str:
    """The ``shown`` lines on one line, ``…`` where lines are left out."""
    return " ".join(ELIDED if i is None else lines[i] for i in layout(shown, len(lines)))


def layout(shown: Sequence[int], count: int) -> list[int | None]:
    """The preview's parts for the ``shown`` lines of ``count``: their indexes in order,
    and None where lines are left out (before, between, after)."""
    parts: list[int | None] = []
    for before, i in zip([-1, *shown], shown, strict=False):
        if i > before + 1:
            parts.append(None)
        parts.append(i)
    if shown[-1] < count - 1:
        parts.append(None)
    return parts


def window(line: str, anchor: int, limit: int, *, before: bool, after: bool) -> str:
    """At most ``limit`` characters of ``line``, markers included, with ``anchor`` a
    quarter in (where it can be), cut between grapheme clusters; ``before``/``after``:
    text outside ``line`` is left out too, so that side is marked whatever the cut."""
    room = limit - 2 * len(ELIDED)
    start = max(0, min(anchor - room // 4, len(line) - room))
    start = grapheme_cut(line, start)
    first = _CLUSTER.match(line)
    if first is not None and start < first.end():
        # Inside the first cluster grapheme_cut answers ``start`` itself (for a cut that
        # must make progress): the cluster's start is 0.
        start = 0
    end = grapheme_cut(line, start + room, floor=start)
    head = ELIDED if before or start > 0 else ""
    tail = ELIDED if after or end < len(line) else ""
    return head + line[start:end] + tail


def as_indexed(text: str) -> tuple[str, Sequence[int]]:
    """``text`` as the search tokenizer reads it, and for each of its characters the index
    in ``text`` of the grapheme cluster it came from.

    Folded one cluster at a time: NFKC and case folding change lengths (ß, İ, ﬁ, NFD
    accents), so positions in a folded copy of the whole text would not index ``text``.
    A cluster is the unit normalisation acts within, so each folds as it would in place.
    """
    if text.isascii():  # most memory: one character each way, at a fraction of the cost
        return _NOT_ASCII_WORD.sub(" ", text.lower()), range(len(text))
    pieces: list[str] = []
    origin: list[int] = []
    folds: dict[str, str] = {}  # a line repeats few distinct clusters
    for cluster in _CLUSTER.finditer(text):
        piece = folds.get(cluster.group())
        if piece is None:
            piece = folds[cluster.group()] = _fold_cluster(cluster.group())
        pieces.append(piece)
        origin.extend([cluster.start()] * len(piece))
    return "".join(pieces), origin


def _fold_cluster(cluster: str) -> str:
    terms = tokenize(cluster, frozenset(), stem=False, cjk_bigrams=False)
    if terms:
        return " ".join(terms)
    # No term: whitespace, punctuation or an emoji separates words; what the tokenizer
    # drops inside a word (a joiner, a soft hyphen, a vowel point) does not.
    separates = any(unicodedata.category(c)[0] in "PSZ" or c.isspace() for c in cluster)
    return " " if separates else ""
