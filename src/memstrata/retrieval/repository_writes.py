"""Writes to one user's ``memory_embeddings`` rows; callers own the transaction (part of
``EmbeddingRepository``). Every deletion is counted in the user's state row
(``EmbeddingState``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import ColumnElement, delete, text

from memstrata.db.models import MemoryEmbedding
from memstrata.retrieval.records import NewChunk, is_conversation_path
from memstrata.retrieval.repository_state import EmbeddingState
from memstrata.retrieval.snapshot_repository import SnapshotRepository
from memstrata.retrieval.terms import encode_terms, round_day
from memstrata.retrieval.vector_binary import native_floats, vector_array, vector_oid

# Every new row, in one statement: the columns from one JSON array, in its order (``n``,
# so ids follow it); a row's own vector from one binary ``vector[]`` parameter (element
# ``k``, retrieval.vector_binary: no vector is ever written as text), or the vector of
# the user's stored row ``source``. Rows without ``created_at`` take now(), the column's
# default.
_INSERT = text(
    "INSERT INTO memory_embeddings (user_id, file_path, chunk_index, chunk_text, "
    "content_hash, source_ids, context, bm25_terms, created_at, embedding, embedding_model, "
    "embedding_dim) "
    "SELECT :u, v.file_path, v.chunk_index, v.chunk_text, v.content_hash, v.source_ids, "
    "v.context, v.bm25_terms, coalesce(v.created_at, now()), "
    "CASE WHEN s.id IS NULL THEN w.vec ELSE s.embedding END, "
    "CASE WHEN s.id IS NULL THEN v.embedding_model ELSE s.embedding_model END, "
    "CASE WHEN s.id IS NULL THEN v.embedding_dim ELSE s.embedding_dim END "
    "FROM jsonb_to_recordset(cast(:rows AS jsonb)) AS v(n int, source bigint, k int, "
    "file_path text, chunk_index int, chunk_text text, content_hash text, source_ids jsonb, "
    "context jsonb, bm25_terms text, created_at timestamptz, embedding_model text, "
    "embedding_dim int) "
    "LEFT JOIN unnest(cast(:vecs AS vector[])) WITH ORDINALITY AS w(vec, k) ON w.k = v.k "
    "LEFT JOIN memory_embeddings s ON s.id = v.source AND s.user_id = :u "
    "ORDER BY v.n"
)


def _own_columns(c: NewChunk) -> dict[str, Any]:
    """The columns a new row takes from itself (not its vector, id or time)."""
    return {
        "file_path": c.file_path,
        "chunk_index": c.chunk_index,
        "chunk_text": c.chunk_text,
        "content_hash": c.content_hash,
        "source_ids": list(c.source_ids) if c.source_ids is not None else None,
        "context": c.context,
        "bm25_terms": c.bm25_terms
        or encode_terms(c.chunk_text, round_day(c.file_path, c.created_at)),
    }


class EmbeddingWrites(EmbeddingState):
    def delete_ids(self, ids: Sequence[int]) -> None:
        """Delete rows; deleting a conversation row also drops the user's index snapshots,
        so a snapshot never keeps a turn's text after its row is gone (retrieval.snapshot)."""
        if ids:
            self._delete(MemoryEmbedding.id.in_(ids))

    def delete_all(self) -> None:
        """Delete every row of the user (a benchmark starting a user afresh), counted and
        dropping the snapshots as :meth:`delete_ids` does. Call under :meth:`lock`, then
        :meth:`bump_generation`."""
        self._delete()

    def erase_rows(self) -> int:
        """Delete every row of the user, counted as removals, and say how many went (a
        user's erasure, ``memory.erase``, which drops the snapshots itself). Call under
        :meth:`lock`, then :meth:`bump_generation` when any went: every process's cached
        index then drops them at its next use."""
        gone = int(
            self.session.scalar(
                text(
                    "WITH gone AS (DELETE FROM memory_embeddings WHERE user_id = :u "
                    "RETURNING 1) SELECT count(*) FROM gone"
                ),
                {"u": self.user_id},
            )
            or 0
        )
        if gone:
            self._count_removals(gone)
        return gone

    def _delete(self, *where: ColumnElement[bool], keep_snapshots: bool = False) -> None:
        paths = self.session.scalars(
            delete(MemoryEmbedding)
            .where(MemoryEmbedding.user_id == self.user_id, *where)
            .returning(MemoryEmbedding.file_path)
        ).all()
        if paths:
            self._count_removals(len(paths))
        if not keep_snapshots and any(is_conversation_path(p) for p in paths):
            SnapshotRepository(self.session, self.user_id).drop_snapshots()

    def insert(self, chunks: Sequence[NewChunk]) -> None:
        """Insert rows with their own vectors (or none) as :meth:`insert_copies` does: rows
        with a ``created_at`` first, then the others, each in input order: the order their
        ids follow."""
        dated = [(None, c) for c in chunks if c.created_at is not None]
        self.insert_copies(dated + [(None, c) for c in chunks if c.created_at is None])

    def park(self, ids: Sequence[int]) -> None:
        """Move rows about to be deleted to negative chunk indexes (``-1 - index``), so
        that rows given their positions (``insert_copies``) can be written before them:
        the unique (user, path, index) key is checked row by row. Nobody outside the
        transaction ever sees a parked row."""
        if ids:
            self.session.execute(
                text(
                    "UPDATE memory_embeddings SET chunk_index = -1 - chunk_index "
                    "WHERE user_id = :u AND id = ANY(:ids)"
                ),
                {"u": self.user_id, "ids": list(ids)},
            )

    def insert_copies(self, rows: Sequence[tuple[int | None, NewChunk]]) -> None:
        """Insert rows in one statement and in order, each with the vector of the user's
        stored row ``source`` when one is given (its own otherwise): that vector is copied
        in the database, never sent — a 2560-float vector as text, written and read back,
        was most of a write that moved many rows. A row without either stores NULL, and
        an absent ``source_ids`` or ``context`` is SQL NULL (read back as None, as the JSON
        null that ORM inserts stored was)."""
        if not rows:
            return
        values = []
        vectors: list[npt.NDArray[np.float64]] = []
        for n, (source, c) in enumerate(rows):
            own = None if source is not None or c.embedding is None else native_floats(c.embedding)
            if own is not None:
                vectors.append(own)
            values.append(
                {
                    "n": n,
                    "source": source,
                    "k": None if own is None else len(vectors),
                    **_own_columns(c),
                    "created_at": None if c.created_at is None else c.created_at.isoformat(),
                    "embedding_model": None if own is None else c.embedding_model,
                    "embedding_dim": None if own is None else own.size,
                }
            )
        # No vector to send (deferred embedding, copies only): no oid needed either.
        vecs = vector_array(vectors, vector_oid(self.session.connection())) if vectors else None
        self.session.execute(_INSERT, {"u": self.user_id, "rows": json.dumps(values), "vecs": vecs})
