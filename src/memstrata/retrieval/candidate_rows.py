"""Which of a user's rows one search may rank (its sources, rows that existed at
``as_of``) and the BM25 side's best of them, with their scores (convex fusion needs them).

Apart from ``search`` so that module reads in one sitting; the benchmarks import
``bm25_top`` and ``as_of_filter`` through ``search`` as before.
"""

from __future__ import annotations

from memstrata.retrieval.user_index import UserIndex


def bm25_top(index: UserIndex, tokens: list[str], n: int, allowed: set[int] | None) -> list[int]:
    """The best ``n`` BM25 keys for ``tokens`` among ``allowed`` (None: every row)."""
    return [key for key, _ in bm25_top_scored(index, tokens, n, allowed)]


def bm25_top_scored(
    index: UserIndex, tokens: list[str], n: int, allowed: set[int] | None
) -> list[tuple[int, float]]:
    """The best ``n`` (key, BM25 score) pairs for ``tokens`` among ``allowed``."""
    if allowed is None:
        return index.bm25.top_n(tokens, n)
    ranked = index.bm25.top_n(tokens, len(index.bm25))
    return [(key, score) for key, score in ranked if key in allowed][:n]


def source_filter(index: UserIndex, wanted: set[str]) -> set[int]:
    """Rows of the ``wanted`` sources (memory, conversation, notes)."""
    return {k for k, r in index.rows.items() if r.source in wanted}


def as_of_filter(index: UserIndex, as_of_ts: float, allowed: set[int] | None) -> set[int] | None:
    """Rows that existed at ``as_of_ts``: resident files always, dated rows up to it
    (None, meaning no filter, when nothing is excluded)."""
    rows = index.rows
    later = {k for k, r in rows.items() if r.created_at > as_of_ts and r.source != "memory"}
    if not later:
        return allowed
    return (set(rows) if allowed is None else allowed) - later
