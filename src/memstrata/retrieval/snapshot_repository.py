"""SQL for ``memory_index_snapshots``, scoped to one user.

Snapshots are derived data (``retrieval.snapshot`` encodes them and says when they are
written); this module only stores, reads and drops them. Writers serialise on
``EmbeddingRepository.lock``, which deletions of rows also take.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import delete, func, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from memstrata.db.models import MemoryIndexSnapshot
from memstrata.memory.kinds import validate_user_id
from memstrata.retrieval.records import SESSION_PREFIX


@dataclass(frozen=True)
class StoredSnapshot:
    format: str  # retrieval.snapshot.format_key() when written
    max_id: int  # every live conversation row up to this id was in the index
    row_count: int
    payload: bytes


class SnapshotRepository:
    def __init__(self, session: Session, user_id: str) -> None:
        self.session = session
        self.user_id = validate_user_id(user_id)

    def snapshot(self, model: str) -> StoredSnapshot | None:
        """The user's snapshot for ``model`` ("" = BM25-only), payload in binary format."""
        driver = self.session.connection().connection.driver_connection
        assert driver is not None
        with driver.cursor(binary=True) as cursor:
            cursor.execute(
                "SELECT format, max_id, row_count, payload FROM memory_index_snapshots "
                "WHERE user_id = %(u)s AND model = %(m)s",
                {"u": self.user_id, "m": model},
            )
            row = cursor.fetchone()
        if row is None:
            return None
        return StoredSnapshot(row[0], int(row[1]), int(row[2]), bytes(row[3]))

    def rows_after_snapshot(self, model: str, format_key: str) -> int:
        """Conversation rows the user's snapshot for ``model`` does not hold: those above
        its ``max_id``; all of them when there is none or it is in another format."""
        return int(
            self.session.scalar(
                text(
                    "SELECT count(*) FROM memory_embeddings WHERE user_id = :u "
                    "AND file_path LIKE :conv AND id > COALESCE((SELECT max_id "
                    "FROM memory_index_snapshots WHERE user_id = :u AND model = :m "
                    "AND format = :f), 0)"
                ),
                {"u": self.user_id, "conv": SESSION_PREFIX + "%", "m": model, "f": format_key},
            )
            or 0
        )

    def save_snapshot(self, model: str, snapshot: StoredSnapshot, ids: Sequence[int]) -> bool:
        """Store ``snapshot`` if every row in it (``ids``) still exists; call under
        ``EmbeddingRepository.lock``, which deletions also take, so a snapshot never
        outlives a deleted row's text. Returns whether it was stored."""
        present = self.session.scalar(
            text("SELECT count(*) FROM memory_embeddings WHERE user_id = :u AND id = ANY(:ids)"),
            {"u": self.user_id, "ids": list(ids)},
        )
        if present != len(set(ids)):
            return False
        values = {
            "user_id": self.user_id,
            "model": model,
            "format": snapshot.format,
            "max_id": snapshot.max_id,
            "row_count": snapshot.row_count,
            "payload": snapshot.payload,
        }
        stmt = insert(MemoryIndexSnapshot).values(values)
        self.session.execute(
            stmt.on_conflict_do_update(
                index_elements=[MemoryIndexSnapshot.user_id, MemoryIndexSnapshot.model],
                set_={**{k: stmt.excluded[k] for k in values}, "created_at": func.now()},
            )
        )
        return True

    def drop_snapshots(self) -> None:
        self.session.execute(
            delete(MemoryIndexSnapshot).where(MemoryIndexSnapshot.user_id == self.user_id)
        )

    def erase_snapshots(self) -> int:
        """:meth:`drop_snapshots`, counted (a user's erasure, ``memory.erase``): how many
        went. Call under ``EmbeddingRepository.lock``, as every snapshot writer does."""
        deleted = self.session.scalars(
            delete(MemoryIndexSnapshot)
            .where(MemoryIndexSnapshot.user_id == self.user_id)
            .returning(MemoryIndexSnapshot.model)
        ).all()
        return len(deleted)
