"""An in-memory index of unit vectors with exact cosine top-n, and the vector maths it
rests on: one way to make a vector unit length, and dot products that do not depend on
where a row sits or which CPU computes them."""

from __future__ import annotations

from collections.abc import Container
from typing import Any

import numpy as np
import numpy.typing as npt

from memstrata.retrieval.topn import best_first


def normalise(
    block: npt.NDArray[np.floating[Any]],
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.float32]]:
    """Which rows of ``block`` have a direction (a finite, non-zero norm), and those rows
    at unit length, in float32.

    The one way a vector is made unit length, for stored rows and queries alike: a row's
    unit vector then depends on its values alone — not on how many rows came with it
    (adding one row and adding many used to round differently) — so a replica seeded
    from a snapshot holds the vectors a load from the rows would. numpy's sum along a
    row is the same pairwise sum whatever the number of rows.
    """
    rows = np.asarray(block, dtype=np.float32)
    norms = np.sqrt(np.add.reduce(rows * rows, axis=1))
    good = np.isfinite(norms) & (norms > 0)  # a zero vector has no direction: BM25 only
    return good, rows[good] / norms[good, None]


def exact_scores(
    rows: npt.NDArray[np.float32], query: npt.NDArray[np.float32]
) -> npt.NDArray[np.float64]:
    """Dot products of ``rows`` with ``query`` that depend on the two vectors alone: the
    products of float32 values are exact in float64, and numpy sums each row pairwise,
    the same way wherever the row sits, however many rows come with it, on any CPU."""
    scores: npt.NDArray[np.float64] = np.add.reduce(
        rows.astype(np.float64) * query.astype(np.float64), axis=1
    )
    return scores


def _matmul_error(dim: int) -> float:
    """A bound on how far BLAS's float32 dot product of two unit vectors is from
    ``exact_scores``: the classic dim · 2⁻²⁴, whatever the order of summation, doubled
    to cover the unit vectors' own rounding with room to spare."""
    return 2.0 * dim * 2.0**-24


def _near_top(sims: npt.NDArray[np.float32], n: int, error: float) -> npt.NDArray[np.intp]:
    """Slots that may be among the ``n`` best by exact score, given ``sims`` each within
    ``error`` of it (``-inf``: not a candidate). With ``s`` the n-th best of ``sims``, n
    rows score at least ``s - error`` exactly, so each of the exact best n does too and
    has ``sims`` of at least ``s - 2·error``; rows tied with the n-th are all kept."""
    size = len(sims)
    nth = np.partition(sims, size - n)[size - n] if n < size else -np.inf
    if nth == -np.inf:  # fewer than n candidates: all of them
        return np.flatnonzero(sims > -np.inf)
    return np.flatnonzero(sims >= nth - 2.0 * error)


class VectorIndex:
    """Unit vectors of one model in a growable matrix; exact cosine top-n (one matmul
    finds the candidates, ``exact_scores`` ranks them)."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._matrix: npt.NDArray[np.float32] = np.zeros((64, dim), dtype=np.float32)
        self._keys: list[int] = []
        self._slot: dict[int, int] = {}
        self._alive: npt.NDArray[np.bool_] = np.zeros(64, dtype=bool)
        self._dead = 0

    def __len__(self) -> int:
        return len(self._slot)

    def add(self, key: int, vector: npt.NDArray[np.float32]) -> None:
        self.add_many([key], [vector])

    def add_many(self, keys: list[int], vectors: list[npt.NDArray[np.float32]]) -> None:
        """Add (or replace) rows; one normalisation and one copy for the lot."""
        if len(set(keys)) != len(keys):  # the last vector of a key wins, as one by one
            last = {key: i for i, key in enumerate(keys)}
            keys, vectors = list(last), [vectors[i] for i in last.values()]
        for key in keys:
            if key in self._slot:
                self.remove(key)
        fits = [i for i, v in enumerate(vectors) if len(v) == self.dim]
        good, block = normalise(
            np.stack([vectors[i] for i in fits]) if fits else np.zeros((0, self.dim))
        )
        chosen = [keys[i] for i, ok in zip(fits, good.tolist(), strict=True) if ok]
        start = len(self._keys)
        end = start + len(chosen)
        if end > len(self._matrix):
            grow = max(end, 2 * len(self._matrix)) - len(self._matrix)
            self._matrix = np.concatenate([self._matrix, np.zeros((grow, self.dim), np.float32)])
            self._alive = np.concatenate([self._alive, np.zeros(grow, dtype=bool)])
        self._matrix[start:end] = block
        self._alive[start:end] = True
        self._keys.extend(chosen)
        for i, key in enumerate(chosen):
            self._slot[key] = start + i

    @classmethod
    def from_unit_rows(cls, keys: list[int], matrix: npt.NDArray[np.float32]) -> VectorIndex:
        """An index holding ``matrix``'s rows, already unit length, under ``keys``."""
        if matrix.ndim != 2 or len(matrix) != len(keys) or not len(keys):
            raise ValueError("a vector snapshot needs one row of the matrix per key")
        index = cls(int(matrix.shape[1]))
        index._matrix = np.array(matrix, dtype=np.float32)  # writable, owned
        index._alive = np.ones(len(keys), dtype=bool)
        index._keys = list(keys)
        index._slot = {key: slot for slot, key in enumerate(keys)}
        return index

    def unit_rows(self, keys: list[int]) -> npt.NDArray[np.float32]:
        """The stored (unit) vectors of ``keys``, a copy."""
        return self._matrix[[self._slot[key] for key in keys]]

    def __contains__(self, key: object) -> bool:
        return key in self._slot

    def remove(self, key: int) -> None:
        slot = self._slot.pop(key, None)
        if slot is None:
            return
        self._alive[slot] = False
        self._dead += 1
        if self._dead > 256 and self._dead > len(self._slot):
            self._compact()

    def top_n(
        self, query: npt.NDArray[np.float32], n: int, allowed: Container[int] | None = None
    ) -> list[tuple[int, float]]:
        """The ``n`` rows most similar to ``query`` (cosine), best first, equal scores by
        row id (``topn.best_first``); only rows in ``allowed`` when given.

        The matmul is BLAS's, whose rounding depends on where a row sits in the matrix
        and on the CPU: two copies of one vector can score a few ulps apart. It only
        finds the rows that can be in the top ``n`` (within its error bound of the n-th);
        those are scored again by ``exact_scores``, which gives a vector the same score
        wherever it sits, and ranked by that.
        """
        used = len(self._keys)
        if n <= 0 or not self._slot or len(query) != self.dim:
            return []
        good, unit = normalise(query[None, :])
        if not good[0]:
            return []
        sims = self._matrix[:used] @ unit[0]
        if self._dead:
            sims[~self._alive[:used]] = -np.inf
        if allowed is not None:
            keep = np.fromiter((k in allowed for k in self._keys), dtype=bool, count=used)
            sims[~keep] = -np.inf
        near = _near_top(sims, n, _matmul_error(self.dim))
        exact = exact_scores(self._matrix[near], unit[0])
        keys = self._keys

        def keys_of(positions: npt.NDArray[np.intp]) -> list[int]:
            return [keys[slot] for slot in near[positions].tolist()]

        return best_first(exact, n, keys_of)

    def nbytes(self) -> int:
        return int(self._matrix.nbytes + self._alive.nbytes)

    def _compact(self) -> None:
        live = np.flatnonzero(self._alive[: len(self._keys)])
        self._matrix = (
            np.ascontiguousarray(self._matrix[live])
            if len(live)
            else np.zeros((64, self.dim), dtype=np.float32)
        )
        self._keys = [self._keys[s] for s in live.tolist()]
        self._slot = {k: i for i, k in enumerate(self._keys)}
        self._alive = np.ones(max(len(self._keys), 64), dtype=bool)
        self._alive[len(self._keys) :] = False
        if len(self._matrix) < len(self._alive):
            pad = np.zeros((len(self._alive) - len(self._matrix), self.dim), dtype=np.float32)
            self._matrix = np.concatenate([self._matrix, pad])
        self._dead = 0
