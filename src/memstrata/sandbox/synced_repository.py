"""SQL for ``sandbox_synced``, scoped to one user: the DB version memstrata last left each
of the user's sandbox files at, per sandbox provider identity (:mod:`memstrata.sandbox.synced`
says when it is written, how it is used and why the identity is part of the key)."""

from __future__ import annotations

from sqlalchemy import delete, func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from memstrata.db.models import SandboxSynced
from memstrata.memory.kinds import validate_user_id


class SyncedRepository:
    def __init__(self, session: Session, user_id: str) -> None:
        self.session = session
        self.user_id = validate_user_id(user_id)

    def get(self, root: str, sandbox: str, file_type: str) -> int | None:
        return self.session.scalar(
            select(SandboxSynced.version).where(
                SandboxSynced.user_id == self.user_id,
                SandboxSynced.root == root,
                SandboxSynced.sandbox == sandbox,
                SandboxSynced.file_type == file_type,
            )
        )

    def note(self, root: str, sandbox: str, file_type: str, version: int) -> None:
        """Record ``version``, replacing the one recorded (lower or higher: the caller
        holds the sandbox's lock, so the last note is the copy the file holds now). Its
        commit does not wait for the WAL flush: a note a crash loses leaves the one before,
        which lags (``sandbox.synced``), and the flush was most of a read-back's cost."""
        self.session.execute(text("SET LOCAL synchronous_commit = off"))
        row = insert(SandboxSynced).values(
            user_id=self.user_id, root=root, sandbox=sandbox, file_type=file_type, version=version
        )
        self.session.execute(
            row.on_conflict_do_update(
                index_elements=["user_id", "root", "sandbox", "file_type"],
                set_={"version": row.excluded.version, "updated_at": func.now()},
            )
        )

    def delete_all(self) -> int:
        """Every note of the user, under every root (an erasure); the number deleted."""
        deleted = self.session.scalars(
            delete(SandboxSynced)
            .where(SandboxSynced.user_id == self.user_id)
            .returning(SandboxSynced.version)
        ).all()
        return len(deleted)
