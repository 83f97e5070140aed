"""SQL for ``memory_embeddings`` and ``memory_index_state``, scoped to one user.

Rows are immutable: any change to a chunk deletes its row and inserts a new one (new id),
and every change bumps the user's generation in the same transaction; a deletion also
adds to the user's removal count, and the bump says it was counted. An in-memory index
that remembers those counts and the ids it holds can therefore bring itself up to date from
any process: rows with larger ids when nothing was removed, a comparison of id sets when
something was (or a writer did not count) — no change log needed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import ColumnElement, delete, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from memstrata.db.models import MemoryEmbedding, MemoryIndexState
from memstrata.memory.kinds import validate_user_id
from memstrata.retrieval.records import (
    SESSION_PREFIX,
    IndexState,
    NewChunk,
    StoredChunk,
    is_conversation_path,
    with_vector,
)
from memstrata.retrieval.snapshot_repository import SnapshotRepository
from memstrata.retrieval.terms import encode_terms, round_day
from memstrata.retrieval.vector import pad_vector
from memstrata.retrieval.wire import json_column, native_vector, parse_vector_binary

_META_COLUMNS = (
    MemoryEmbedding.id,
    MemoryEmbedding.file_path,
    MemoryEmbedding.chunk_index,
    MemoryEmbedding.chunk_text,
    MemoryEmbedding.created_at,
    MemoryEmbedding.content_hash,
    MemoryEmbedding.embedding_model,
    MemoryEmbedding.embedding_dim,
    MemoryEmbedding.source_ids,
    MemoryEmbedding.context,
)


def _chunk(row: Any, vector: npt.NDArray[np.float32] | None = None) -> StoredChunk:
    return StoredChunk(
        id=row.id,
        file_path=row.file_path,
        chunk_index=row.chunk_index,
        chunk_text=row.chunk_text,
        created_at=row.created_at,
        content_hash=row.content_hash,
        embedding_model=row.embedding_model,
        embedding_dim=row.embedding_dim,
        source_ids=tuple(row.source_ids or ()),
        vector=vector,
        context=row.context,
    )


# Rows from one JSON array (``insert_copies``); a source's vector when it has one. Rows
# without ``created_at`` take now(), as the column's default gives an ``insert``.
_INSERT_COPIES = text(
    "INSERT INTO memory_embeddings (user_id, file_path, chunk_index, chunk_text, "
    "content_hash, source_ids, context, bm25_terms, created_at, embedding, embedding_model, "
    "embedding_dim) "
    "SELECT :u, v.file_path, v.chunk_index, v.chunk_text, v.content_hash, v.source_ids, "
    "v.context, v.bm25_terms, coalesce(v.created_at, now()), "
    "CASE WHEN s.id IS NULL THEN cast(v.embedding AS vector) ELSE s.embedding END, "
    "CASE WHEN s.id IS NULL THEN v.embedding_model ELSE s.embedding_model END, "
    "CASE WHEN s.id IS NULL THEN v.embedding_dim ELSE s.embedding_dim END "
    "FROM jsonb_to_recordset(cast(:rows AS jsonb)) AS v(n int, source bigint, "
    "file_path text, chunk_index int, chunk_text text, content_hash text, source_ids jsonb, "
    "context jsonb, bm25_terms text, created_at timestamptz, embedding text, "
    "embedding_model text, embedding_dim int) "
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


class EmbeddingRepository:
    def __init__(self, session: Session, user_id: str) -> None:
        self.session = session
        self.user_id = validate_user_id(user_id)

    # -- reads -------------------------------------------------------------------------
    def chunks_for_paths(
        self, file_paths: Sequence[str], *, with_vectors: bool = False
    ) -> list[StoredChunk]:
        stmt = (
            select(*_META_COLUMNS, MemoryEmbedding.embedding)
            if with_vectors
            else select(*_META_COLUMNS)
        )
        rows = self.session.execute(
            stmt.where(
                MemoryEmbedding.user_id == self.user_id,
                MemoryEmbedding.file_path.in_(list(file_paths)),
            ).order_by(MemoryEmbedding.file_path, MemoryEmbedding.chunk_index)
        ).all()
        if not with_vectors:
            return [_chunk(r) for r in rows]
        return [_chunk(r, native_vector(r.embedding, r.embedding_dim)) for r in rows]

    def live_ids(self) -> set[int]:
        """Every id the user has. One binary array through the driver: 10k ids as ORM rows
        cost ~9 ms, and a refresh after a deletion (a re-embedded or edited row) reads
        them all."""
        driver = self.session.connection().connection.driver_connection
        assert driver is not None
        with driver.cursor(binary=True) as cursor:
            cursor.execute(
                "SELECT array_agg(id) FROM memory_embeddings WHERE user_id = %s",
                (self.user_id,),
            )
            found = cursor.fetchone()
        return set(found[0] or ()) if found is not None else set()

    def count(self) -> int:
        return int(
            self.session.scalar(select(func.count()).where(MemoryEmbedding.user_id == self.user_id))
            or 0
        )

    def load(
        self,
        ids: Sequence[int] | None = None,
        *,
        after_id: int | None = None,
        files_too: bool = False,
    ) -> list[StoredChunk]:
        """Rows with native-length vectors, in id order: all, ``ids``, or ids > ``after_id``
        (``files_too``: and every row that is not a conversation turn, whatever its id —
        what an index snapshot does not hold).

        Vectors are read as ``vector_send(subvector(embedding, 1, embedding_dim))``: a 384-d
        model's vector crosses the wire as 384 binary floats, not 2560 floats as text
        (parsing text floats was most of a cold load). The whole result comes in the binary
        protocol (the vector's bytes are not sent as hex), and the two JSON columns come as
        text and are parsed in one ``json.loads`` for all rows, not one call per value:
        together a quarter of the time a load of 10k rows spent here (docs/BENCHMARKS.md).
        """
        query = (
            "SELECT id, file_path, chunk_index, chunk_text, created_at, content_hash, "
            "embedding_model, embedding_dim, source_ids::text, context::text, bm25_terms, "
            "CASE WHEN embedding IS NULL OR embedding_dim IS NULL THEN NULL "
            "ELSE vector_send(subvector(embedding, 1, embedding_dim)) END AS vec "
            "FROM memory_embeddings WHERE user_id = %(u)s"
        )
        params: dict[str, Any] = {"u": self.user_id}
        if after_id is not None and files_too:
            query += " AND (id > %(after)s OR file_path IS NULL OR file_path NOT LIKE %(conv)s)"
            params.update(after=after_id, conv=SESSION_PREFIX + "%")
        elif after_id is not None:
            query += " AND id > %(after)s"
            params["after"] = after_id
        elif ids is not None:
            query += " AND id = ANY(%(ids)s)"
            params["ids"] = list(ids)
        # The driver's cursor on the session's connection (same transaction and snapshot):
        # building SQLAlchemy rows was a third of a cold load of 10k rows.
        driver = self.session.connection().connection.driver_connection
        assert driver is not None
        with driver.cursor(binary=True) as cursor:
            cursor.execute(query + " ORDER BY id", params)
            rows = cursor.fetchall()
        source_ids = json_column([r[8] for r in rows])
        contexts = json_column([r[9] for r in rows])
        return [
            StoredChunk(
                r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], tuple(ids or ()),
                None if r[11] is None else parse_vector_binary(r[11]), context, r[10],
            )
            for r, ids, context in zip(rows, source_ids, contexts, strict=True)
        ]  # fmt: skip

    def missing_embeddings(self, model: str, limit: int) -> list[StoredChunk]:
        """Rows with no vector, or one from another model (a model change), oldest first."""
        rows = self.session.execute(
            select(*_META_COLUMNS)
            .where(*self._missing(model))
            .order_by(MemoryEmbedding.id)
            .limit(limit)
        ).all()
        return [_chunk(r) for r in rows]

    def count_missing(self, model: str) -> int:
        """How many rows ``missing_embeddings`` would still return."""
        return int(
            self.session.execute(select(func.count()).where(*self._missing(model))).scalar_one()
        )

    def _missing(self, model: str) -> tuple[ColumnElement[bool], ...]:
        return (
            MemoryEmbedding.user_id == self.user_id,
            (MemoryEmbedding.embedding.is_(None))
            | (MemoryEmbedding.embedding_model.is_distinct_from(model)),
        )

    def nearest(
        self, query: Sequence[float], model: str, n: int, ids: Sequence[int] | None = None
    ) -> list[tuple[int, float]]:
        """Exact cosine top-n in pgvector over this user's vectors of ``model`` that have
        the query's length.

        Zero padding leaves cosine distances unchanged, so the padded query is compared
        with padded rows directly — between vectors of one length only: a row of another
        length (stored before the API's length changed, waiting to be re-embedded) padded
        to 2560 has a cosine with the query too, a meaningless one, and was ranked by it.
        The in-memory index keeps one length as well (``VectorIndex.add_many``).
        """
        distance = MemoryEmbedding.embedding.cosine_distance(pad_vector(query))
        stmt = (
            select(MemoryEmbedding.id, distance)
            .where(
                MemoryEmbedding.user_id == self.user_id,
                MemoryEmbedding.embedding.is_not(None),
                MemoryEmbedding.embedding_model == model,
                MemoryEmbedding.embedding_dim == len(query),
                # A zero vector has no direction (its distance is NaN, which sorts last
                # and would fill a short list); the index in memory leaves it out too.
                func.vector_norm(MemoryEmbedding.embedding) > 0,
            )
            .order_by(distance, MemoryEmbedding.id)
            .limit(n)
        )
        if ids is not None:
            stmt = stmt.where(MemoryEmbedding.id.in_(list(ids)))
        return [(int(i), 1.0 - float(d)) for i, d in self.session.execute(stmt).all()]

    def state(self) -> IndexState:
        """The user's generation and counts (zeros before the first write)."""
        found = self.session.execute(
            select(
                MemoryIndexState.generation,
                MemoryIndexState.removals,
                MemoryIndexState.counted_writes,
            ).where(MemoryIndexState.user_id == self.user_id)
        ).first()
        return IndexState(*(int(v) for v in found)) if found is not None else IndexState(0, 0, 0)

    # -- writes (callers own the transaction) --------------------------------------------
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

    def replace_vectors(self, vectors: Mapping[int, Sequence[float]], model: str) -> int:
        """Give rows their vectors (re-embedding): rows are immutable, so each is written
        again with its vector, under a new id; rows gone since they were read (a writer
        replaced them, their text with them) are skipped. Call under :meth:`lock`. Bumps
        the generation when anything was written; returns how many rows were."""
        present = self.load(list(vectors))
        if present:
            # The texts stay (each row comes back with its vector), so the user's snapshots
            # stay valid: a load from one finds the old rows gone and the new ones above its
            # max_id, as after any write. Dropping them made every healing pass of an import
            # or a model change cost the user a full cold load (and a snapshot rewrite).
            self._delete(MemoryEmbedding.id.in_([c.id for c in present]), keep_snapshots=True)
        self.insert([with_vector(c, vectors[c.id], model) for c in present])
        if present:
            self.bump_generation()
        return len(present)

    def _count_removals(self, n: int) -> None:
        """Tell every search cache that rows went (``IndexCache`` compares ids only then).
        A writer outside this class that bumps only the generation is safe too: caches
        then count the user's rows (migration 0005)."""
        self.session.execute(
            insert(MemoryIndexState)
            .values(user_id=self.user_id, generation=0, removals=n, counted_writes=0)
            .on_conflict_do_update(
                index_elements=[MemoryIndexState.user_id],
                set_={"removals": MemoryIndexState.removals + n},
            )
        )

    def insert(self, chunks: Sequence[NewChunk]) -> None:
        if not chunks:
            return
        values = []
        for c in chunks:
            row: dict[str, Any] = {
                "user_id": self.user_id,
                **_own_columns(c),
                "embedding": None,
                "embedding_model": None,
                "embedding_dim": None,
            }
            if c.created_at is not None:
                row["created_at"] = c.created_at
            if c.embedding is not None:
                row["embedding"] = pad_vector(c.embedding)
                row["embedding_model"] = c.embedding_model
                row["embedding_dim"] = len(c.embedding)
            values.append(row)
        # Rows without an explicit created_at take the server default (now()).
        with_time = [v for v in values if "created_at" in v]
        without_time = [v for v in values if "created_at" not in v]
        for batch in (with_time, without_time):
            if batch:
                self.session.execute(insert(MemoryEmbedding), batch)

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
        """Insert rows as ``insert`` does, in one statement and in order, each with the
        vector of the user's stored row ``source`` when one is given (its own otherwise):
        that vector is copied in the database, never sent — a 2560-float vector as text,
        written and read back, was most of a write that moved many rows."""
        values = []
        for n, (source, c) in enumerate(rows):
            own = c.embedding if source is None else None
            values.append(
                {
                    "n": n,
                    "source": source,
                    **_own_columns(c),
                    "created_at": None if c.created_at is None else c.created_at.isoformat(),
                    # pgvector's text form, as its SQLAlchemy type writes it
                    "embedding": None
                    if own is None
                    else f"[{','.join(map(str, pad_vector(own)))}]",
                    "embedding_model": None if own is None else c.embedding_model,
                    "embedding_dim": None if own is None else len(own),
                }
            )
        if values:
            self.session.execute(_INSERT_COPIES, {"u": self.user_id, "rows": json.dumps(values)})

    def bump_generation(self) -> int:
        """A write to the user's rows, whose deletions went through ``delete_ids``."""
        stmt = (
            insert(MemoryIndexState)
            .values(user_id=self.user_id, generation=1, counted_writes=1)
            .on_conflict_do_update(
                index_elements=[MemoryIndexState.user_id],
                set_={
                    "generation": MemoryIndexState.generation + 1,
                    "counted_writes": MemoryIndexState.counted_writes + 1,
                },
            )
            .returning(MemoryIndexState.generation)
        )
        return int(self.session.scalar(stmt) or 0)

    def lock(self) -> None:
        """Serialise writers of one user's rows (transaction-scoped advisory lock)."""
        self.session.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))"),
            {"k": f"memstrata.embeddings:{self.user_id}"},
        )
