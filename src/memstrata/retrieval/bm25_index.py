"""The incremental BM25 index, scored by the rule in ``bm25``: apart from it because the
index is state that changes on every indexed turn, while the rule is pure.

``BM25Index`` holds one user's chunks in memory. Queries must be fast at tens of thousands
of chunks and adds happen on every indexed turn, so nothing is precomputed that depends on
N or avgdl: the index stores raw term frequencies in per-term postings and applies the
formula at query time with numpy, which keeps scores identical to a from-scratch
computation over the live documents however they were added or removed.

Its postings storage (per-term objects, a frozen block, the flat arrays snapshots store)
is in ``bm25_postings``.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Generic, cast

import numpy as np
import numpy.typing as npt

from memstrata.retrieval.bm25 import K1, B, _idf
from memstrata.retrieval.bm25_postings import BM25Arrays, K, _Frozen, _Postings
from memstrata.retrieval.topn import best_first

# Compact once dead slots outnumber live ones (and there are enough to be worth it), so
# removal stays O(document length) amortised and postings never exceed twice the live data.
_MIN_DEAD_TO_COMPACT = 256


class BM25Index(Generic[K]):
    """An incremental BM25 index over documents identified by hashable keys.

    Not thread-safe: callers serialise access (one index per user makes that natural).
    """

    def __init__(self, *, k1: float = K1, b: float = B) -> None:
        self.k1 = k1
        self.b = b
        self._postings: dict[str, _Postings] = {}
        self._frozen: _Frozen | None = None  # more postings, as arrays (see _Frozen)
        self._slot_of: dict[K, int] = {}
        self._keys: list[K | None] = []  # by slot; None once removed
        # Each slot's terms as tokenised, to undo df on removal and to export
        # (``to_arrays``); not deduplicated (that saved a tenth of a 10k-row cold load);
        # one space-joined string after ``from_arrays`` (split only if the slot is removed).
        self._terms: list[Sequence[str] | str] = []
        self._lengths: npt.NDArray[np.float64] = np.zeros(64)
        self._alive: npt.NDArray[np.bool_] = np.zeros(64, dtype=bool)
        self._total_length = 0  # over live documents, exact
        self._dead = 0
        # (term, slot) pairs held, frozen or not: kept as they come and go, since the cache
        # asks for it after every change (summing the thawed postings grew with them).
        self._pairs = 0

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, key: object) -> bool:
        return key in self._slot_of

    def add(self, key: K, tokens: Iterable[str]) -> None:
        """Index ``tokens`` under ``key``, replacing (and re-ordering) any earlier document."""
        if key in self._slot_of:
            self.remove(key)
        slot = len(self._keys)
        terms = tuple(tokens)
        counts = Counter(terms)
        length = len(terms)
        if slot == len(self._lengths):
            self._lengths = np.concatenate([self._lengths, np.zeros(slot)])
            self._alive = np.concatenate([self._alive, np.zeros(slot, dtype=bool)])
        self._lengths[slot] = length
        self._alive[slot] = True
        self._total_length += length
        self._keys.append(key)
        self._terms.append(terms)
        self._slot_of[key] = slot
        for term, tf in counts.items():
            entry = self._entry(term)
            entry.slots.append(slot)
            entry.tfs.append(tf)
            entry.df += 1
        self._pairs += len(counts)

    def add_many(self, docs: Sequence[tuple[K, Sequence[str]]]) -> None:
        """``add`` for many documents at once, with the same result as adding them in
        order, but counting terms with numpy instead of per-document Python: loading a
        user's index (10k chunks) is dominated by this."""
        keys = [key for key, _ in docs]
        if len(set(keys)) != len(keys) or len(docs) < 64:
            for key, tokens in docs:
                self.add(key, tokens)
            return
        for key in keys:
            if key in self._slot_of:
                self.remove(key)
        base = len(self._keys)
        n = len(docs)
        lengths = np.fromiter((len(tokens) for _, tokens in docs), dtype=np.int64, count=n)
        flat: list[str] = []
        for _, tokens in docs:
            flat.extend(tokens)
        vocab = {term: i for i, term in enumerate(dict.fromkeys(flat))}
        terms = list(vocab)
        term_ids = np.fromiter(map(vocab.__getitem__, flat), dtype=np.int64, count=len(flat))
        doc_ids = np.repeat(np.arange(n, dtype=np.int64), lengths)
        pairs, tfs = np.unique(term_ids * n + doc_ids, return_counts=True)  # term-major
        pair_terms = pairs // n
        pair_docs = (pairs % n + base).astype(np.intc)
        tfs = tfs.astype(np.intc)
        self._pairs += len(pairs)
        bounds = np.flatnonzero(np.diff(pair_terms)) + 1
        # Documents without a single term (an emoji-only note) leave no posting at all.
        starts = np.concatenate([[0], bounds]).tolist() if len(pairs) else []
        ends = [*bounds.tolist(), len(pairs)] if len(pairs) else []
        if not self._postings and self._frozen is None:  # a cold load: keep the arrays
            group_terms = [terms[t] for t in pair_terms[starts].tolist()] if len(pairs) else []
            self._frozen = _Frozen(group_terms, [*starts, len(pairs)], pair_docs, tfs)
            starts = ends = []
        for start, end in zip(starts, ends, strict=True):
            entry = self._entry(terms[int(pair_terms[start])])
            entry.slots.frombytes(pair_docs[start:end].tobytes())
            entry.tfs.frombytes(tfs[start:end].tobytes())
            entry.df += end - start
        needed = base + n
        if needed > len(self._lengths):
            grow = max(needed, 2 * len(self._lengths)) - len(self._lengths)
            self._lengths = np.concatenate([self._lengths, np.zeros(grow)])
            self._alive = np.concatenate([self._alive, np.zeros(grow, dtype=bool)])
        self._lengths[base:needed] = lengths
        self._alive[base:needed] = True
        self._total_length += int(lengths.sum())
        self._keys.extend(keys)
        self._terms.extend(tokens for _, tokens in docs)
        for i, key in enumerate(keys):
            self._slot_of[key] = base + i

    def remove(self, key: K) -> None:
        """Forget ``key``; raises ``KeyError`` if it is not indexed."""
        slot = self._slot_of.pop(key)
        self._keys[slot] = None
        self._alive[slot] = False
        self._total_length -= int(self._lengths[slot])
        for term in dict.fromkeys(self.terms_of_slot(slot)):
            entry = self._entry(term)
            entry.df -= 1
            if entry.df == 0:
                del self._postings[term]  # every slot left in it is dead
                self._pairs -= len(entry.slots)
        self._terms[slot] = ()
        self._dead += 1
        if self._dead >= _MIN_DEAD_TO_COMPACT and self._dead > len(self._slot_of):
            self._compact()

    def terms_of(self, key: K) -> Sequence[str]:
        """The terms ``key`` was indexed with, once per occurrence."""
        return self.terms_of_slot(self._slot_of[key])

    def terms_of_slot(self, slot: int) -> Sequence[str]:
        terms = self._terms[slot]
        if isinstance(terms, str):
            return terms.split(" ") if terms else ()
        return terms

    def to_arrays(self) -> BM25Arrays[K]:
        """The live documents as flat arrays (slot order kept), for ``from_arrays``."""
        if self._dead:
            self._compact()
        frozen = self._frozen
        if frozen is not None and not self._postings:  # one bulk load: already flat
            terms = list(frozen.row_of)  # in block order
            starts = np.array(frozen.starts, dtype=np.int64)
            slots, tfs = frozen.slots, frozen.tfs
        else:
            self._thaw()
            entries = self._postings.values()
            terms = list(self._postings)
            sizes = np.fromiter((len(e.slots) for e in entries), np.int64, len(terms))
            starts = np.zeros(len(terms) + 1, dtype=np.int64)
            np.cumsum(sizes, out=starts[1:])
            slots = np.frombuffer(b"".join(e.slots.tobytes() for e in entries), np.intc)
            tfs = np.frombuffer(b"".join(e.tfs.tobytes() for e in entries), np.intc)
        n = len(self._keys)
        keys: list[K] = [k for k in self._keys if k is not None]
        return BM25Arrays(
            keys=keys,
            doc_terms=[" ".join(self.terms_of_slot(slot)) for slot in range(n)],
            lengths=self._lengths[:n].copy(),
            terms=terms,
            starts=starts,
            slots=slots.astype(np.int32),
            tfs=tfs.astype(np.int32),
        )

    @classmethod
    def from_arrays(cls, data: BM25Arrays[K], *, k1: float = K1, b: float = B) -> BM25Index[K]:
        """An index equal to the one ``to_arrays`` was called on, without counting terms."""
        index = cls(k1=k1, b=b)
        n = len(data.keys)
        if (
            not (len(data.doc_terms) == len(data.lengths) == n)
            or len(data.starts) != len(data.terms) + 1
        ):
            raise ValueError("BM25 arrays of different lengths")
        slots = data.slots.astype(np.intc, copy=False)
        tfs = data.tfs.astype(np.intc, copy=False)
        if len(slots) and (int(slots.min()) < 0 or int(slots.max()) >= n):
            raise ValueError("a BM25 posting names a document that is not there")
        index._frozen = _Frozen(data.terms, data.starts.tolist(), slots, tfs)
        index._pairs = len(slots)
        spare = max(64, n)
        index._lengths = np.concatenate([data.lengths.astype(np.float64), np.zeros(spare)])
        index._alive = np.concatenate([np.ones(n, dtype=bool), np.zeros(spare, dtype=bool)])
        index._total_length = int(data.lengths.sum())
        index._keys = list(data.keys)
        index._terms = list(data.doc_terms)
        index._slot_of = {key: slot for slot, key in enumerate(data.keys)}
        return index

    def top_n(self, query_tokens: Iterable[str], n: int) -> list[tuple[K, float]]:
        """The ``n`` best documents with a positive score, best first, equal scores by key
        (``topn.best_first``): the same documents give the same answer however and in
        whatever order they were added."""
        n_docs = len(self._slot_of)
        if n <= 0 or n_docs == 0 or self._total_length == 0:
            return []
        n_slots = len(self._keys)
        k1, b = self.k1, self.b
        lengths = self._lengths[:n_slots]
        norm = k1 * (1.0 - b) + (k1 * b * n_docs / self._total_length) * lengths
        scores = np.zeros(n_slots)
        for term, query_tf in Counter(query_tokens).items():
            entry = self._postings.get(term)
            if entry is not None:
                # Copies, not np.frombuffer views: a live view would stop array.append
                # resizing.
                slots = np.array(entry.slots, dtype=np.intc)
                tfs = np.array(entry.tfs, dtype=np.float64)
                df = entry.df
            elif self._frozen is not None and (held := self._frozen.view(term)) is not None:
                slots, tfs = held[0], held[1].astype(np.float64)
                df = len(slots)
            else:
                continue
            weight = query_tf * _idf(df, n_docs) * (k1 + 1.0)
            scores[slots] += weight * tfs / (tfs + norm[slots])
        if self._dead:
            scores[~self._alive[:n_slots]] = 0.0
        return self._best(scores, n)

    def _best(self, scores: npt.NDArray[np.float64], n: int) -> list[tuple[K, float]]:
        hits = np.flatnonzero(scores > 0.0)
        keys = self._keys

        def keys_of(positions: npt.NDArray[np.intp]) -> list[K]:
            # Only live slots score above zero, so none of these keys is None.
            return cast(list[K], [keys[slot] for slot in hits[positions].tolist()])

        return best_first(scores[hits], n, keys_of)

    def posting_count(self) -> int:
        """(term, slot) pairs held, dead slots included: what the postings cost in memory."""
        return self._pairs

    def term_count(self) -> int:
        """Distinct terms with a posting list (each costs a postings object in memory)."""
        return len(self._postings) + (len(self._frozen.row_of) if self._frozen else 0)

    def _entry(self, term: str) -> _Postings:
        """The term's postings object, taken out of the frozen block or made empty."""
        entry = self._postings.get(term)
        if entry is None:
            taken = self._frozen.take(term) if self._frozen is not None else None
            entry = self._postings[term] = taken if taken is not None else _Postings()
            if self._frozen is not None and not self._frozen.row_of:
                self._frozen = None
        return entry

    def _thaw(self) -> None:
        """Every frozen term as a postings object (before renumbering or exporting)."""
        if self._frozen is not None:
            for term in list(self._frozen.row_of):
                self._entry(term)
            self._frozen = None

    def _compact(self) -> None:
        """Drop dead slots, renumbering live ones in their original (insertion) order."""
        self._thaw()
        live = np.flatnonzero(self._alive[: len(self._keys)])
        new_slot = np.full(len(self._keys), -1, dtype=np.intc)
        new_slot[live] = np.arange(len(live), dtype=np.intc)
        for entry in self._postings.values():
            renumbered = new_slot[np.array(entry.slots, dtype=np.intc)]
            keep = renumbered >= 0
            tfs = np.array(entry.tfs, dtype=np.intc)[keep]
            slots = renumbered[keep]
            entry.slots = array("i", slots.tobytes())
            entry.tfs = array("i", tfs.tobytes())
        self._keys = [self._keys[slot] for slot in live.tolist()]
        self._terms = [self._terms[slot] for slot in live.tolist()]
        spare = max(64, len(live))
        self._lengths = np.concatenate([self._lengths[live], np.zeros(spare)])
        self._alive = np.concatenate([np.ones(len(live), dtype=bool), np.zeros(spare, dtype=bool)])
        self._slot_of = {key: slot for slot, key in enumerate(self._keys) if key is not None}
        self._dead = 0
        self._pairs = sum(len(entry.slots) for entry in self._postings.values())
