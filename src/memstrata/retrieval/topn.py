"""The one rule both retrievers pick their best rows by.

Equal scores are common — a repeated short turn ("ok, thanks") has the same text, so the
same BM25 score and the same vector — so the rule settles them by the row's key, which
every replica agrees on, never by where the row sits in an index (that follows the load
history: a replica seeded from a snapshot holds its rows in another order than one loaded
from the rows) or by what ``np.argpartition`` happens to pick (it differs by CPU).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Protocol, TypeVar, cast

import numpy as np
import numpy.typing as npt


class SortableKey(Hashable, Protocol):
    """A key that orders (row ids; the benchmarks' (file, chunk) tuples)."""

    def __lt__(self, other: Any, /) -> bool: ...


K = TypeVar("K", bound=SortableKey)


def best_first(
    scores: npt.NDArray[np.floating[Any]],
    n: int,
    keys_of: Callable[[npt.NDArray[np.intp]], list[K]],
) -> list[tuple[K, float]]:
    """``(key, score)`` of the ``n`` highest of ``scores``, by score descending, then key
    ascending; a position scored ``-inf`` is never chosen. ``keys_of`` gives the keys of
    an array of positions (keys of one type).

    Every position scoring at least the n-th score is kept before the cut, so which of
    the tied ones are in depends on the keys alone. Keys are read for those positions
    only — a few more than ``n`` unless many tie — and all sorting is numpy's.
    """
    size = len(scores)
    if n <= 0 or size == 0:
        return []
    floor = np.partition(scores, size - n)[size - n] if n < size else -np.inf
    # Below n live positions the n-th score is -inf: every finite one is in.
    picked = np.flatnonzero(scores >= floor if floor > -np.inf else scores > -np.inf)
    keys = keys_of(picked)
    values = scores[picked]
    order = np.lexsort((_sortable(keys), -values))[:n]
    return list(zip([keys[i] for i in order.tolist()], values[order].tolist(), strict=True))


def _sortable(keys: list[K]) -> npt.NDArray[np.int64]:
    """Numbers that sort like ``keys``: the keys themselves when they are integers (row
    ids: no Python sort), else their ranks."""
    if keys and type(keys[0]) is int:
        return np.fromiter(cast(list[int], keys), dtype=np.int64, count=len(keys))
    ranks = np.empty(len(keys), dtype=np.int64)
    ranks[sorted(range(len(keys)), key=keys.__getitem__)] = np.arange(len(keys))
    return ranks
