"""Okapi BM25 with Lucene's idf: the rule, as pure functions.

    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    score(q, d) = sum over query tokens t of
                  idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))

Lucene's idf never goes negative, so a term in most of a user's turns still counts a little
instead of pushing documents down. A token repeated in the query contributes once per
occurrence, as in bm25s (and a Lucene boolean query with a repeated clause); pass
``list(dict.fromkeys(tokens))`` to weigh each distinct token once. The ``(k1 + 1)`` factor
is the classic Okapi numerator: bm25s and Lucene 8+ drop it, which scales every score by
the constant ``1 / (k1 + 1)`` and changes no ranking.

The incremental index that applies it to one user's chunks is ``bm25_index.BM25Index``
(its postings storage in ``bm25_postings``); ``bm25_scores`` here is the plain reference
it is tested against.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

__all__ = ["K1", "B", "bm25_scores"]

K1 = 1.2
B = 0.75


def _idf(df: int, n_docs: int) -> float:
    return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))


def bm25_scores(
    query_tokens: Sequence[str],
    docs_tokens: Sequence[Sequence[str]],
    *,
    k1: float = K1,
    b: float = B,
) -> list[float]:
    """Score every document in plain Python; the reference ``BM25Index`` is tested against."""
    n_docs = len(docs_tokens)
    if n_docs == 0:
        return []
    total_length = sum(len(doc) for doc in docs_tokens)
    if total_length == 0:
        return [0.0] * n_docs
    avgdl = total_length / n_docs
    tfs = [Counter(doc) for doc in docs_tokens]
    scores = [0.0] * n_docs
    for term in query_tokens:
        df = sum(1 for tf in tfs if term in tf)
        if df == 0:
            continue
        idf = _idf(df, n_docs)
        for i, (tf, doc) in enumerate(zip(tfs, docs_tokens, strict=True)):
            f = tf.get(term, 0)
            if f:
                scores[i] += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * len(doc) / avgdl))
    return scores
