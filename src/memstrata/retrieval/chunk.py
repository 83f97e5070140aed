"""Split memory text into chunks of at most ``max_tokens`` for indexing and embedding.

Paragraphs are the natural unit of a memory file (one fact or one dated entry each), so
blank lines are the primary boundary and small neighbouring paragraphs are packed together:
fewer, fuller chunks mean fewer embedding calls and BM25 documents with useful length. A
paragraph that is too long falls back to sentence boundaries, and a sentence that is still
too long is cut by tokens, preferring the last whitespace so words survive when possible,
and otherwise the last grapheme-cluster boundary (``memstrata.text.grapheme_cut``), so an
emoji sequence, a flag or a letter with its combining marks is never split between chunks.

Two guarantees the indexer relies on: no chunk exceeds ``max_tokens`` under ``count``, and
no non-whitespace character is lost or reordered (only whitespace at chunk edges and the
blank lines between merged paragraphs are normalised). ``count`` must be monotone over
prefixes (``count(s[:i]) <= count(s)``), which ``count_tokens`` guarantees, because the
hard split binary-searches on it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Literal

from memstrata.retrieval.tokenize import count_tokens
from memstrata.text import grapheme_cut

# Spec: memory files and conversation rounds are cut into chunks of at most 512 tokens.
CHUNK_TOKENS = 512
# Tokens of the previous round prefixed to a conversation round's chunk as context
# (retrieval.rounds; the LoCoMo dev set chose it, docs/BENCHMARKS.md).
CONTEXT_TOKENS = 128

# How USER.md and MEMORY.md are cut: "paragraphs" is the spec's rule (this module);
# "entries", an opt-in departure, one chunk per Markdown entry (retrieval.entry_chunks).
MemoryChunking = Literal["paragraphs", "entries"]

__all__ = ["MemoryChunking", "chunk_text", "paragraphs"]

# A line containing only whitespace also ends a paragraph.
_BLANK_LINE = re.compile(r"\n[^\S\n]*\n\s*")

# Where a sentence ends: Latin terminators only before whitespace (so "3.14" and "e.g.x"
# stay whole), CJK terminators anywhere, either optionally followed by closing quotes or
# brackets; and any line break inside a paragraph. A run of Latin terminators is tried
# whole and from its first one only: a part of it ends no sentence the whole run does not,
# and the search, trying every start, read the run to its end from each (16,000 dots and
# a letter took 3.6 s).
_SENTENCE_END = re.compile(
    r"(?:(?<![.!?])[.!?]++[\"'”’」』)）\]]*+(?=\s|$))|(?:[。！？]+[\"'”’」』)）\]]*)|\n"
)

_WHITESPACE = re.compile(r"\s+")

Span = tuple[int, int]
TokenCounter = Callable[[str], int]


def chunk_text(
    text: str, max_tokens: int = CHUNK_TOKENS, count: TokenCounter = count_tokens
) -> list[str]:
    """Chunk ``text`` (see the module docstring); whitespace-only input gives ``[]``."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    chunks: list[str] = []
    pending: str | None = None  # small paragraphs being merged
    for para in paragraphs(text):
        if count(para) > max_tokens:
            if pending is not None:
                chunks.append(pending)
                pending = None
            chunks.extend(_split_paragraph(para, max_tokens, count))
        elif pending is None:
            pending = para
        else:
            merged = f"{pending}\n\n{para}"
            if count(merged) <= max_tokens:
                pending = merged
            else:
                chunks.append(pending)
                pending = para
    if pending is not None:
        chunks.append(pending)
    return chunks


def paragraphs(text: str) -> Iterator[str]:
    """The non-blank paragraphs of ``text`` (split on blank lines), stripped."""
    for part in _BLANK_LINE.split(text):
        stripped = part.strip()
        if stripped:
            yield stripped


def _split_paragraph(para: str, max_tokens: int, count: TokenCounter) -> list[str]:
    """Pack whole sentences greedily, keeping the paragraph's own spacing between them.

    "Greedily" is found by a galloping search rather than by counting the growing chunk
    once per sentence: a paragraph of thousands of one-word lines (each line a sentence)
    cost a count of the whole chunk per line, 5.4 s for a 256 KiB file. The chunks are
    the same, because ``count`` is monotone over prefixes: the sentences that fit are a
    prefix of those that follow."""
    sentences = list(_sentence_spans(para))
    chunks: list[str] = []
    current: Span | None = None
    i = 0
    while i < len(sentences):
        if current is not None:
            start = current[0]
            taken = _sentences_that_fit(para, start, sentences, i, max_tokens, count)
            if taken:
                current = (start, sentences[i + taken - 1][1])
                i += taken
                if i == len(sentences):
                    break
            chunks.append(para[current[0] : current[1]])
            current = None
        sentence = sentences[i]
        i += 1
        if count(para[sentence[0] : sentence[1]]) <= max_tokens:
            current = sentence
            continue
        pieces = _hard_split(para, sentence, max_tokens, count)
        chunks.extend(para[start:end] for start, end in pieces[:-1])
        current = pieces[-1]  # the tail may still share a chunk with the next sentence
    if current is not None:
        chunks.append(para[current[0] : current[1]])
    return chunks


def _sentences_that_fit(
    para: str, start: int, sentences: list[Span], first: int, max_tokens: int, count: TokenCounter
) -> int:
    """How many of ``sentences[first:]`` extend the chunk starting at ``start`` within
    ``max_tokens`` (the chunk through sentence ``first + n - 1`` fits for every n up to
    the answer and for none above it)."""

    def fits(n: int) -> bool:
        return count(para[start : sentences[first + n - 1][1]]) <= max_tokens

    return _largest_fitting(fits, len(sentences) - first, first_probe=1)


def _sentence_spans(para: str) -> Iterator[Span]:
    """Yield each sentence as a span trimmed of surrounding whitespace, skipping blanks."""
    start = 0
    ends = [match.end() for match in _SENTENCE_END.finditer(para)]
    for end in [*ends, len(para)]:
        span = _trim(para, start, end)
        if span is not None:
            yield span
        start = end


def _trim(text: str, start: int, end: int) -> Span | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _hard_split(text: str, span: Span, max_tokens: int, count: TokenCounter) -> list[Span]:
    """Cut ``text[span]`` into the fewest greedy pieces that fit, never splitting inside
    a word unless the word alone is too long."""
    pieces: list[Span] = []
    start, end = span
    while True:
        fit = _longest_fitting_prefix(text, start, end, max_tokens, count)
        if fit == 0:
            raise ValueError(
                f"cannot chunk: {text[start]!r} alone counts more than max_tokens={max_tokens}"
            )
        cut = start + fit
        if cut == end:
            pieces.append((start, end))
            return pieces
        if not text[cut].isspace():
            # Back off to the last whitespace if that still leaves something in this piece,
            # else to the last grapheme-cluster boundary: a word too long for a chunk is
            # cut, but not inside an emoji sequence, a flag or a letter with its marks.
            last_gap = max((m.start() for m in _WHITESPACE.finditer(text, start, cut)), default=0)
            cut = last_gap if last_gap > start else grapheme_cut(text, cut, floor=start)
        piece = _trim(text, start, cut)
        assert piece is not None  # text[start] is not whitespace and cut > start
        pieces.append(piece)
        rest = _trim(text, cut, end)
        if rest is None:
            return pieces
        start = rest[0]


def _longest_fitting_prefix(
    text: str, start: int, end: int, max_tokens: int, count: TokenCounter
) -> int:
    """Largest ``n`` with ``count(text[start:start + n]) <= max_tokens``; the cost stays
    proportional to the piece, not to the whole sentence."""
    return _largest_fitting(
        lambda n: count(text[start : start + n]) <= max_tokens,
        end - start,
        first_probe=max_tokens * 4,
    )


def _largest_fitting(fits: Callable[[int], bool], limit: int, *, first_probe: int) -> int:
    """Largest ``n`` in ``[0, limit]`` with ``fits(n)``, for a ``fits`` that holds up to some
    ``n`` and not above it (``fits(0)`` is taken to hold): galloping from ``first_probe``,
    then bisecting."""
    good, bad = 0, limit + 1
    probe = max(1, min(first_probe, limit))
    while probe < bad:
        if fits(probe):
            good = probe
            if probe == limit:
                break
            probe = min(probe * 2, limit)
        else:
            bad = probe
    while bad - good > 1:
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    return good
