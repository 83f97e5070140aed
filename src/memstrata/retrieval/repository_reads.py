"""Reads of one user's ``memory_embeddings`` rows (part of ``EmbeddingRepository``), and
the lease ``memstrata reindex`` takes on the rows it is about to embed (``claim_missing``):
a claim like the re-embedding worker's, not a change of what the rows hold."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import Boolean, ColumnElement, func, literal_column, select, text, update

from memstrata.db.models import MemoryEmbedding
from memstrata.retrieval.claimer import LOCK_CLASS, claimed_by_sql
from memstrata.retrieval.queue import HELD
from memstrata.retrieval.records import SESSION_PREFIX, StoredChunk
from memstrata.retrieval.repository_scope import UserScoped
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

# A claim holds the row (``queue.HELD``): a worker's claim, or reindex's own lease, which
# the workers leave alone in turn (``queue.UNCLAIMED``). A worker's retry pause is not held.
_HELD = literal_column(HELD, Boolean)


@dataclass(frozen=True)
class Lease:
    """A batch ``claim_missing`` took: when its lease ends, and the token it recorded
    (None: the lease alone — no claimer given, or its lock was gone)."""

    until: datetime
    claimed_by: int | None


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


class EmbeddingReads(UserScoped):
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

    def claim_missing(
        self, model: str, limit: int, lease_s: float, claimer: int | None = None
    ) -> tuple[list[StoredChunk], Lease | None]:
        """Lease up to ``limit`` rows with no vector, or one from another model (a model
        change), that no claim holds (``queue.HELD``: rows in a worker's retry pause are
        taken), oldest first, for ``lease_s`` seconds: the worker leaves them alone
        meanwhile (``queue.UNCLAIMED``), as this leaves its rows alone. The claim records
        ``claimer`` (a token of ``retrieval.claimer``) if its lock is held now, as a
        worker's does, so the batch of a run that died is taken back (``claimer.reclaim``).
        Rows another transaction is writing or claiming are skipped, never waited for.
        Returns the rows, in id order, and their lease (``release_lease``). No
        generation bump: a lease changes nothing a search reads."""
        # The ids first, locked, then the lease by id, in the caller's transaction (as
        # ``queue.claim``): as ``id IN (SELECT … LIMIT n FOR UPDATE SKIP LOCKED)`` in one
        # statement the subquery ran again for the rows updated and leased them all.
        ids = self.session.scalars(
            select(MemoryEmbedding.id)
            .where(*self._missing(model), ~_HELD)
            .order_by(MemoryEmbedding.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        ).all()
        if not ids:
            return [], None
        token = (
            None
            if claimer is None
            else text(claimed_by_sql(claimer)).bindparams(claimer=claimer, cls=LOCK_CLASS)
        )
        rows = self.session.execute(
            update(MemoryEmbedding)
            .where(MemoryEmbedding.user_id == self.user_id, MemoryEmbedding.id.in_(ids))
            .values(
                embedding_claimed_until=func.now() + timedelta(seconds=lease_s),
                embedding_claimed_by=token,
            )
            .returning(
                *_META_COLUMNS,
                MemoryEmbedding.embedding_claimed_until,
                MemoryEmbedding.embedding_claimed_by,
            )
            .execution_options(synchronize_session=False)
        ).all()
        rows = sorted(rows, key=lambda r: r.id)
        lease = Lease(rows[0].embedding_claimed_until, rows[0].embedding_claimed_by)
        return [_chunk(r) for r in rows], lease

    def release_lease(self, ids: Sequence[int], lease: Lease) -> None:
        """End the lease ``claim_missing`` took on those of ``ids`` still under it: rows
        that got no vector (the API failed) are claimable again at once. A row given its
        vector is gone (written again under a new id), and a row whose lease ran out or
        was taken back and that a worker claimed since is the worker's: neither is
        touched."""
        if ids:
            self.session.execute(
                update(MemoryEmbedding)
                .where(
                    MemoryEmbedding.user_id == self.user_id,
                    MemoryEmbedding.id.in_(list(ids)),
                    MemoryEmbedding.embedding_claimed_by.is_not_distinct_from(lease.claimed_by),
                    MemoryEmbedding.embedding_claimed_until == lease.until,
                )
                .values(embedding_claimed_until=None, embedding_claimed_by=None)
                .execution_options(synchronize_session=False)
            )

    def count_missing(self, model: str, *, held: bool | None = None) -> int:
        """How many rows have no vector of ``model`` (``claim_missing`` ignoring claims):
        all of them, or (``held``) those a claim holds now — a worker embedding them, or
        another reindex — or (``held=False``) the others, a worker's retry pause included."""
        where = self._missing(model)
        if held is not None:
            where += (_HELD if held else ~_HELD,)
        return int(self.session.execute(select(func.count()).where(*where)).scalar_one())

    def count_held(self, model: str) -> int:
        """How many of those rows a claim holds now (``queue.HELD``)."""
        return self.count_missing(model, held=True)

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
