"""One user's search index: BM25 postings and vectors over the user's rows, at a known
database generation (``retrieval.cache`` keeps these current and bounded)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from memstrata.retrieval import snapshot
from memstrata.retrieval.bm25_index import BM25Index
from memstrata.retrieval.records import IndexState, StoredChunk
from memstrata.retrieval.rows import Row, source_of
from memstrata.retrieval.terms import decode_terms, round_day
from memstrata.retrieval.vector_index import VectorIndex

# What a held index costs in resident memory (RSS), per item (``UserIndex.approx_bytes``):
# - a row: 200 bytes of heap (the Row, its dict entry and BM25 slot) + 2,048 of the load's
#   own garbage, which the interpreter's pools keep among the index's objects and no trim
#   returns;
# - a (term, row) posting: 90 bytes of heap (the row's term tuple entry, the term string it
#   keeps, the posting's slot and tf) + 56 of that garbage;
# - a distinct term: 250 bytes of heap (its postings object and dict entry);
# - an index however empty: 2 KiB (1.7 KiB measured).
# The heap parts were measured with tracemalloc on LoCoMo rows, ~10 % above; the rest was
# fitted to the RSS of fresh processes holding one index of 1k, 3k and 10k English and
# Chinese rows after a trim (1.41–1.51 × the heap alone) and rounded up, so the estimate
# stays 7–22 % above each (docs/BENCHMARKS.md, "Search cache memory (RSS vs estimate)").
ROW_BYTES = 2248
POSTING_BYTES = 146
TERM_BYTES = 250
INDEX_BYTES = 2048


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

    def apply(self, added: Iterable[StoredChunk], removed: Iterable[int]) -> bool:
        """Add and remove rows; whether the vectors' length changed, which drops the
        vectors held (the caller then loads every row again: ``cache``)."""
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
                context_chars=c.context_chars,
            )
            replaced = self.rows.get(c.id)
            if replaced is not None:
                self._text_bytes -= sys.getsizeof(replaced.text)
            self.rows[c.id] = row
            self._text_bytes += sys.getsizeof(row.text)
            if source == "conversation":
                self.unsnapshotted += 1
            day = round_day(c.file_path, c.created_at)
            docs.append((c.id, decode_terms(c.bm25_terms, c.chunk_text, day)))
            if c.vector is not None and self.model is not None and c.embedding_model == self.model:
                vector_keys.append(c.id)
                vectors.append(c.vector)
        self.bm25.add_many(docs)
        changed = False
        if vectors:
            # The newest row's length wins: the embedder replaces a length it learned from
            # a broken answer, and the healer re-embeds the rows of the old one.
            newest = len(vectors[-1])
            changed = self.vectors is not None and self.vectors.dim != newest
            if self.vectors is None or changed:
                self.vectors = VectorIndex(newest)
            self.vectors.add_many(vector_keys, vectors)
        return changed

    def approx_bytes(self) -> int:
        """Resident bytes (RSS) this index holds, from counts: what the search cache's
        byte budget charges for it (``retrieval.cache``).

        Exact for the texts (``sys.getsizeof``) and the vector matrix — one numpy array,
        resident as counted; the rest is the per-row, per-posting, per-term and per-index
        constants above, chosen to run above the measurement rather than below: the byte
        budget is an upper bound.
        """
        vectors = self.vectors.nbytes() if self.vectors is not None else 0
        return (
            INDEX_BYTES
            + self._text_bytes
            + vectors
            + ROW_BYTES * len(self.rows)
            + POSTING_BYTES * self.bm25.posting_count()
            + TERM_BYTES * self.bm25.term_count()
        )
