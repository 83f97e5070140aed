"""SQL for ``user_memory``, scoped to one user at construction: no query can forget it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from memstrata.db.models import UserMemory
from memstrata.memory.kinds import validate_user_id


@dataclass(frozen=True)
class StoredFile:
    file_type: str
    content: str
    version: int
    updated_at: datetime


def _stored(row: UserMemory) -> StoredFile:
    return StoredFile(row.file_type, row.content, row.version, row.updated_at)


class MemoryFileRepository:
    def __init__(self, session: Session, user_id: str) -> None:
        self.session = session
        self.user_id = validate_user_id(user_id)

    def get(self, file_type: str) -> StoredFile | None:
        row = self.session.scalar(
            select(UserMemory).where(
                UserMemory.user_id == self.user_id, UserMemory.file_type == file_type
            )
        )
        return None if row is None else _stored(row)

    def list(self) -> list[StoredFile]:
        rows = self.session.scalars(
            select(UserMemory).where(UserMemory.user_id == self.user_id).order_by(UserMemory.id)
        )
        return [_stored(r) for r in rows]

    def insert_if_absent(self, file_type: str, content: str) -> StoredFile | None:
        """Insert at version 1; None when a row already exists (concurrency-safe)."""
        stmt = (
            insert(UserMemory)
            .values(user_id=self.user_id, file_type=file_type, content=content, version=1)
            .on_conflict_do_nothing(constraint="uq_user_memory_user_file")
            .returning(UserMemory)
        )
        row = self.session.scalar(stmt)
        return None if row is None else _stored(row)

    def upsert(self, file_type: str, content: str) -> StoredFile:
        """Last-writer-wins write: insert at 1 or bump the version by exactly one."""
        base = insert(UserMemory).values(
            user_id=self.user_id, file_type=file_type, content=content, version=1
        )
        stmt = base.on_conflict_do_update(
            constraint="uq_user_memory_user_file",
            set_={
                "content": base.excluded.content,
                "version": UserMemory.version + 1,
                "updated_at": func.now(),
            },
        ).returning(UserMemory)
        row = self.session.scalar(stmt)
        assert row is not None  # an upsert always returns its row
        return _stored(row)

    def compare_and_set(
        self, file_type: str, content: str, expected_version: int
    ) -> StoredFile | None:
        """Write only if the stored version is ``expected_version``; None on a mismatch.

        A single conditional UPDATE: PostgreSQL re-checks the WHERE clause after waiting on
        a concurrent writer's row lock, so of N writers with the same expected version
        exactly one matches.
        """
        stmt = (
            update(UserMemory)
            .where(
                UserMemory.user_id == self.user_id,
                UserMemory.file_type == file_type,
                UserMemory.version == expected_version,
            )
            .values(content=content, version=UserMemory.version + 1, updated_at=func.now())
            .returning(UserMemory)
        )
        row = self.session.scalar(stmt)
        return None if row is None else _stored(row)

    def delete_all(self) -> int:
        """Delete every file of the user (an erasure, ``memory.erase``); how many went.
        Waits for a writer still holding one of the rows, whose write is then deleted too."""
        deleted = self.session.scalars(
            delete(UserMemory).where(UserMemory.user_id == self.user_id).returning(UserMemory.id)
        ).all()
        return len(deleted)
