"""How ``bm25_index.BM25Index`` holds its postings: one object per term (``_Postings``),
a block of arrays for terms no change has touched since a bulk load or a snapshot
(``_Frozen``), and the whole index as flat arrays (``BM25Arrays``, what snapshots store).

Apart from the index because they are storage, not search: the index's queries and
changes read more easily without the layout, and a snapshot needs only ``BM25Arrays``.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from memstrata.retrieval.topn import SortableKey

K = TypeVar("K", bound=SortableKey)


@dataclass(frozen=True)
class BM25Arrays(Generic[K]):
    """A ``BM25Index`` as flat arrays: postings of ``terms[i]`` are
    ``slots[starts[i]:starts[i+1]]`` (with ``tfs``); slot ``j`` is ``keys[j]``."""

    keys: list[K]
    doc_terms: list[str]  # each document's terms, space-joined (to undo df on removal)
    lengths: npt.NDArray[np.float64]
    terms: list[str]
    starts: npt.NDArray[np.int64]
    slots: npt.NDArray[np.int32]
    tfs: npt.NDArray[np.int32]


class _Postings:
    """Slots and term frequencies of the documents containing one term, in slot order."""

    __slots__ = ("df", "slots", "tfs")

    def __init__(self) -> None:
        self.slots = array("i")
        self.tfs = array("i")
        self.df = 0  # live documents only; ``slots`` may still list dead ones


class _Frozen:
    """Postings kept as one block of arrays (from a bulk load or a snapshot) instead of an
    object per term: building 13k ``_Postings`` was a third of a snapshot load. A term
    leaves the block, as a ``_Postings``, the first time a document with it is added or
    removed; until then every slot it lists is live."""

    __slots__ = ("pairs", "row_of", "slots", "starts", "tfs")

    def __init__(
        self,
        terms: Sequence[str],
        starts: list[int],
        slots: npt.NDArray[np.intc],
        tfs: npt.NDArray[np.intc],
    ) -> None:
        self.row_of = dict(zip(terms, range(len(terms)), strict=True))
        self.starts = starts  # len(terms) + 1 offsets into slots / tfs
        self.slots = slots
        self.tfs = tfs
        self.pairs = len(slots)  # (term, slot) pairs still held here

    def view(self, term: str) -> tuple[npt.NDArray[np.intc], npt.NDArray[np.intc]] | None:
        row = self.row_of.get(term)
        if row is None:
            return None
        start, end = self.starts[row], self.starts[row + 1]
        return self.slots[start:end], self.tfs[start:end]

    def take(self, term: str) -> _Postings | None:
        row = self.row_of.pop(term, None)
        if row is None:
            return None
        start, end = self.starts[row], self.starts[row + 1]
        entry = _Postings()
        entry.slots.frombytes(self.slots[start:end].tobytes())
        entry.tfs.frombytes(self.tfs[start:end].tobytes())
        entry.df = end - start
        self.pairs -= end - start
        return entry
