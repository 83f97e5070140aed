"""Per-user in-memory search indexes that stay coherent with the database.

The database is canonical; an index here is a derived copy. Every write to a user's
``memory_embeddings`` rows bumps ``memory_index_state.generation`` in the same transaction
(see ``repository``), so before each search the cache reads one row: generation unchanged →
serve from memory; changed → load the rows with larger ids than any held, and only when
rows may have been deleted too (the removal counts, migration 0005), diff the user's live
row ids against the ids held. That works across processes with no extra channel, costs one
primary-key lookup per search, and an append-only conversation stream refreshes by reading
just its new rows.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections import OrderedDict
from collections.abc import Container, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy.orm import Session, sessionmaker

from memstrata.logs import log_failure
from memstrata.retrieval import snapshot
from memstrata.retrieval.bm25 import BM25Index
from memstrata.retrieval.gcpause import cyclic_gc_paused
from memstrata.retrieval.repository import EmbeddingRepository, IndexState, StoredChunk
from memstrata.retrieval.rows import Row, source_of
from memstrata.retrieval.terms import decode_terms
from memstrata.retrieval.topn import best_first

logger = logging.getLogger(__name__)

# Measured per-item heap costs (see UserIndex.approx_bytes): a Row with its dict entry and
# BM25 slot; one (term, row) pair — the row's term tuple entry, the term string it keeps,
# the posting's slot and tf; one distinct term's postings object and dict entry.
_ROW_BYTES = 200
_PAIR_BYTES = 90
_TERM_BYTES = 250


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


class UserIndex:
    """BM25 + vectors over one user's rows, at a known database generation."""

    def __init__(self, user_id: str, model: str | None) -> None:
        self.user_id = user_id
        self.model = model
        # The user's memory_index_state when this index was last brought up to date
        # (generation -1: never loaded, or a cold load that did not finish).
        self.state = IndexState(-1, -1, -1)
        self.rows: dict[int, Row] = {}
        self.bm25: BM25Index[int] = BM25Index()
        self.vectors: VectorIndex | None = None
        self.lock = threading.Lock()
        # Set once the cache lets go of this index: a snapshot job that still reaches it
        # must not write it (a cold load of the user schedules the write again).
        self.evicted = False
        # Conversation rows held that the stored snapshot lacks (retrieval.snapshot):
        # counted by ``apply``, zeroed by ``export``; ``seed``'s rows are in the snapshot.
        self.unsnapshotted = 0
        # Kept as rows come and go: summing 10k texts' sizes at every refresh was most of
        # the refresh after a new turn (docs/BENCHMARKS.md, "Refresh after a write").
        self._text_bytes = 0

    @property
    def generation(self) -> int:
        return self.state.generation

    def reset(self) -> None:
        """Back to empty, as before a cold load (which may have failed half way)."""
        self.rows = {}
        self.bm25 = BM25Index()
        self.vectors = None
        self.unsnapshotted = 0
        self._text_bytes = 0

    def seed(self, contents: snapshot.Contents) -> None:
        """Fill an empty index from a snapshot's rows, postings and vectors."""
        self.rows = {r.id: r for r in contents.rows}
        self._text_bytes = sum(sys.getsizeof(r.text) for r in contents.rows)
        self.bm25 = BM25Index.from_arrays(contents.bm25)
        if self.model is not None and contents.vector_ids:
            self.vectors = VectorIndex.from_unit_rows(contents.vector_ids, contents.vectors)

    def export(self) -> snapshot.Export | None:
        """This index's conversation rows for a snapshot (call under ``lock``). Cheap:
        rows and term lists are immutable and shared; only the vectors are copied."""
        if self.evicted or self.generation < 0:
            return None  # the cache let go of it, or it never finished loading
        keys = sorted(k for k, r in self.rows.items() if r.source == "conversation")
        rows = [self.rows[k] for k in keys]
        vector_ids = [k for k in keys if self.vectors is not None and k in self.vectors]
        if self.vectors is not None and vector_ids:
            vectors = self.vectors.unit_rows(vector_ids)
        else:
            vectors = np.zeros((0, 0), dtype=np.float32)
        self.unsnapshotted = 0
        return snapshot.Export(
            user_id=self.user_id,
            model=self.model,
            rows=rows,
            terms=[self.bm25.terms_of(k) for k in keys],
            vector_ids=vector_ids,
            vectors=vectors,
            max_id=max(self.rows, default=0),
        )

    def apply(self, added: Iterable[StoredChunk], removed: Iterable[int]) -> None:
        for key in removed:
            gone = self.rows.pop(key, None)
            if gone is not None:
                self._text_bytes -= sys.getsizeof(gone.text)
                self.bm25.remove(key)
                if self.vectors is not None:
                    self.vectors.remove(key)
        # In bulk: a cold load of 10k rows is this loop (docs/BENCHMARKS.md).
        docs: list[tuple[int, list[str]]] = []
        vector_keys: list[int] = []
        vectors: list[npt.NDArray[np.float32]] = []
        for c in added:
            source = source_of(c.file_path)
            row = Row(
                id=c.id,
                file_path=c.file_path,
                chunk_index=c.chunk_index,
                text=c.chunk_text,
                created_at=c.created_at.timestamp(),
                source=source,
                source_ids=c.covered_ids,
                model=c.embedding_model,
            )
            replaced = self.rows.get(c.id)
            if replaced is not None:
                self._text_bytes -= sys.getsizeof(replaced.text)
            self.rows[c.id] = row
            self._text_bytes += sys.getsizeof(row.text)
            if source == "conversation":
                self.unsnapshotted += 1
            docs.append((c.id, decode_terms(c.bm25_terms, c.chunk_text)))
            if c.vector is not None and self.model is not None and c.embedding_model == self.model:
                vector_keys.append(c.id)
                vectors.append(c.vector)
        self.bm25.add_many(docs)
        if vectors:
            if self.vectors is None:
                self.vectors = VectorIndex(len(vectors[0]))
            self.vectors.add_many(vector_keys, vectors)

    def approx_bytes(self) -> int:
        """Heap bytes this index holds, from counts; calibrated against tracemalloc.

        Exact for the texts (``sys.getsizeof``) and the vector matrix; the rest is
        per-row, per-(term, row) and per-term constants measured with tracemalloc on
        LoCoMo rows (``benchmarks/load/cache_memory.py``), chosen so the estimate runs ~10 %
        above the measurement rather than below: the byte budget is an upper bound.
        """
        vectors = self.vectors.nbytes() if self.vectors is not None else 0
        return (
            self._text_bytes
            + vectors
            + _ROW_BYTES * len(self.rows)
            + _PAIR_BYTES * self.bm25.posting_count()
            + _TERM_BYTES * self.bm25.term_count()
        )


@dataclass(frozen=True)
class CacheStats:
    """What ``/metrics`` shows about one process's search indexes."""

    bytes: int
    users: int
    hits: int
    misses: int
    evictions: int
    max_bytes: int | None
    snapshot_loads: int = 0  # cold loads that started from an index snapshot
    snapshot_writes: int = 0
    snapshot_errors: int = 0  # unreadable snapshots and failed writes


class IndexCache:
    """LRU of ``UserIndex`` objects, refreshed against the database generation.

    Bounded by ``max_users`` and, when given, by ``max_bytes`` (the sum of the indexes'
    ``approx_bytes``): least recently used users are evicted until both hold. The index
    just searched is never evicted by its own search, so one user larger than the whole
    budget is still served (and goes at the next search of anyone else).
    """

    def __init__(
        self,
        sessions: sessionmaker[Session],
        max_users: int = 256,
        max_bytes: int | None = None,
        snapshots: snapshot.SnapshotWriter | None = None,
    ) -> None:
        self.sessions = sessions
        self.max_users = max_users
        self.max_bytes = max_bytes
        self.snapshots = snapshots  # None: neither read nor write index snapshots
        self._entries: OrderedDict[tuple[str, str | None], UserIndex] = OrderedDict()
        self._sizes: dict[tuple[str, str | None], int] = {}
        self._bytes = 0
        self._hits = self._misses = self._evictions = 0
        self._snapshot_loads = self._snapshot_errors = 0
        self._lock = threading.Lock()

    def get(self, user_id: str, model: str | None) -> UserIndex:
        """The user's index, brought up to date; the caller holds ``index.lock`` while using it."""
        key = (user_id, model)
        with self._lock:
            index = self._entries.get(key)
            if index is None:
                self._misses += 1
                index = UserIndex(user_id, model)
                self._entries[key] = index
            else:
                self._hits += 1
            self._entries.move_to_end(key)
            self._evict(keep=key)
        with index.lock:
            changed = self._refresh(index)
            size = index.approx_bytes() if changed else None
        if size is not None:
            with self._lock:
                if self._entries.get(key) is index:  # not evicted meanwhile
                    self._bytes += size - self._sizes.get(key, 0)
                    self._sizes[key] = size
                    self._evict(keep=key)
        return index

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                self._bytes,
                len(self._entries),
                self._hits,
                self._misses,
                self._evictions,
                self.max_bytes,
                self._snapshot_loads,
                self.snapshots.written if self.snapshots is not None else 0,
                self._snapshot_errors + (self.snapshots.failed if self.snapshots else 0),
            )

    def _evict(self, keep: tuple[str, str | None]) -> None:
        """Drop least recently used entries (never ``keep``) until both bounds hold."""
        budget = self.max_bytes
        while len(self._entries) > 1 and (
            len(self._entries) > max(self.max_users, 1)
            or (budget is not None and self._bytes > budget)
        ):
            oldest = next(iter(self._entries))
            if oldest == keep:
                break
            self._entries.pop(oldest).evicted = True
            self._bytes -= self._sizes.pop(oldest, 0)
            self._evictions += 1

    def _refresh(self, index: UserIndex) -> bool:
        """Bring ``index`` to the database's current state for its user.

        Writers of one user's rows are serialised by an advisory lock and rows are
        immutable, so ids are committed in increasing order per user: the rows added since
        the last refresh are exactly those with a larger id. Whether rows were deleted too
        comes from the removal count when every write since counted its deletions
        (``IndexState.counted_since``), else from ``held + added − count``; only then are
        the id sets compared (counting the user's rows after every new turn was a third of
        the refresh at 10k rows). A cold load starts from the user's snapshot when there
        is one (its conversation rows up to ``max_id``) and reads the rest — memory files,
        documents, later rows — the same way. One REPEATABLE READ snapshot keeps the reads
        consistent with each other. Returns whether anything was (re)loaded.
        """
        if index.generation >= 0 and self._is_current(index):
            return False
        with self.sessions() as session:
            session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
            repo = EmbeddingRepository(session, index.user_id)
            state = repo.state()
            if state.generation == index.generation:
                return False
            removed: set[int] = set()
            with cyclic_gc_paused(), self._loading():
                cold = index.generation < 0
                if cold:
                    index.reset()  # an earlier cold load may have failed after seeding
                seeded_to = self._seed(index, repo) if cold else None
                if cold and seeded_to is None:
                    added = repo.load()
                else:
                    after = seeded_to if seeded_to is not None else max(index.rows, default=0)
                    added = repo.load(after_id=after, files_too=seeded_to is not None)
                    if _rows_may_be_gone(index, repo, state, cold, len(added)):
                        live = repo.live_ids()
                        removed = set(index.rows) - live
                        missing = live - set(index.rows) - {c.id for c in added}
                        added += repo.load(sorted(missing)) if missing else []
                index.apply(added, removed)
        index.state = state
        self._maybe_snapshot(index)
        return True

    def _is_current(self, index: UserIndex) -> bool:
        """Whether the database's generation is still the index's: the check before every
        search. One statement in autocommit, so no BEGIN and ROLLBACK round trips around it
        (a search made four; the REPEATABLE READ transaction is opened only to load)."""
        with self.sessions() as session:
            session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
            state = EmbeddingRepository(session, index.user_id).state()
        return state.generation == index.generation

    def _loading(self) -> AbstractContextManager[None]:
        return self.snapshots.loading() if self.snapshots is not None else nullcontext()

    def _seed(self, index: UserIndex, repo: EmbeddingRepository) -> int | None:
        """Fill a cold ``index`` from the user's snapshot; its ``max_id``, or None when
        there is no usable one (the caller then loads every row)."""
        if self.snapshots is None or self.snapshots.min_rows <= 0:
            return None
        stored = repo.snapshot(snapshot.model_key(index.model))
        if stored is None or stored.format != snapshot.format_key():
            return None
        try:
            index.seed(snapshot.decode(stored.payload, stored.max_id))
        except ValueError as exc:  # SnapshotError, or arrays that do not fit together
            log_failure(logger, "index.snapshot.unreadable", exc, user_id=index.user_id)
            with self._lock:
                self._snapshot_errors += 1
            index.reset()
            return None
        with self._lock:
            self._snapshot_loads += 1
        return stored.max_id

    def warm(self, user_id: str, model: str | None, uncovered: int) -> UserIndex:
        """Bring the user's index up to date, and have its snapshot written when the
        database says ``uncovered`` conversation rows are in no stored snapshot — which the
        index's own count misses when the snapshot was dropped after it was exported (a
        deletion drops it) while the index stayed current."""
        index = self.get(user_id, model)
        with index.lock:
            # Otherwise the refresh counted them, and scheduled the write if one was due.
            missed = uncovered > index.unsnapshotted
            if missed:
                index.unsnapshotted = uncovered
        if missed:
            self._maybe_snapshot(index)
        return index

    def _maybe_snapshot(self, index: UserIndex) -> None:
        writer = self.snapshots
        if writer is None or not snapshot.should_write(index.unsnapshotted, writer.min_rows):
            return
        # The job names the user, not the index: a queued job may wait long (the writer
        # lets bursts of loads pass first), and holding the index would keep it in memory
        # after eviction, outside the byte budget.
        key = (index.user_id, index.model)
        writer.schedule(*key, partial(self._export, key), partial(self._holds, key))

    def _holds(self, key: tuple[str, str | None]) -> bool:
        """Whether the user's index is still here: a snapshot job waiting its turn gives
        up once it is not."""
        with self._lock:
            return key in self._entries

    def _export(self, key: tuple[str, str | None]) -> snapshot.Export | None:
        """The snapshot job's export: from the user's index resident when the job runs —
        the one that scheduled it, or a later load of the user whose own request found
        this job still pending — and only when it holds rows the stored snapshot lacks.
        Nothing for a user evicted meanwhile: its next cold load schedules again."""
        with self._lock:
            index = self._entries.get(key)
        if index is None:
            return None
        with index.lock:
            writer = self.snapshots
            if writer is None or not snapshot.should_write(index.unsnapshotted, writer.min_rows):
                return None  # written by an earlier job since this one was queued
            return index.export()

    def __len__(self) -> int:
        return len(self._entries)


def _rows_may_be_gone(
    index: UserIndex, repo: EmbeddingRepository, state: IndexState, cold: bool, added: int
) -> bool:
    """Whether rows ``index`` holds may have been deleted: when every write since it was
    current counted its deletions, whether any were counted; otherwise (a writer that did
    not count, or an index just seeded from a snapshot, which carries no counts) whether
    held + added rows differ from the user's row count."""
    if not cold and state.counted_since(index.state):
        return state.removals != index.state.removals
    return len(index.rows) + added != repo.count()
