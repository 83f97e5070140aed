"""The memory-file store: CRUD with optimistic locking, limits, and idempotent provisioning.

The database is the source of truth for SOUL/USER/MEMORY. Sandbox mirroring and
re-indexing are layered on top (``memstrata.sync``), so this module stays a pure DB service.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from memstrata.db.engine import transaction
from memstrata.errors import ContentTooLargeError, InvalidContentError, VersionConflictError
from memstrata.logs import log_event
from memstrata.memory.kinds import USER_FILE_KINDS, FileKind, parse_kind, validate_user_id
from memstrata.memory.repository import MemoryFileRepository, StoredFile
from memstrata.memory.templates import TemplateSet

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemoryFile:
    user_id: str
    kind: FileKind
    content: str
    version: int
    updated_at: datetime | None
    changed: bool = True  # False when a write was skipped because the content was identical

    @property
    def file_type(self) -> str:
        return self.kind.file_type

    @property
    def name(self) -> str:
        return self.kind.api_name


def validate_content(content: object, max_bytes: int) -> str:
    if not isinstance(content, str):
        raise InvalidContentError(f"content must be a string, got {type(content).__name__}")
    if "\x00" in content:
        raise InvalidContentError("content must not contain NUL (\\x00) characters")
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError as exc:  # lone surrogates cannot be stored as UTF-8 text
        raise InvalidContentError(f"content is not valid Unicode text: {exc.reason}") from exc
    if size > max_bytes:
        raise ContentTooLargeError(size, max_bytes)
    return content


class MemoryStore:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        templates: TemplateSet,
        max_content_bytes: int = 256 * 1024,
    ) -> None:
        self._sessions = sessions
        self.templates = templates
        self.max_content_bytes = max_content_bytes

    def get_memory_file(self, user_id: str, kind: str | FileKind) -> MemoryFile | None:
        """The stored file, or None. ``agents`` reads legacy rows only."""
        k = parse_kind(kind, allow_legacy=True)
        with self._sessions() as session:
            stored = MemoryFileRepository(session, user_id).get(k.file_type)
        return None if stored is None else self._file(user_id, k, stored)

    def list_memory_files(self, user_id: str) -> list[MemoryFile]:
        with self._sessions() as session:
            rows = MemoryFileRepository(session, user_id).list()
        by_type = {k.file_type: k for k in FileKind}
        return [
            self._file(user_id, by_type[r.file_type], r) for r in rows if r.file_type in by_type
        ]

    def upsert_memory_file(
        self,
        user_id: str,
        kind: str | FileKind,
        content: str,
        expected_version: int | None = None,
        *,
        skip_unchanged: bool = False,
    ) -> MemoryFile:
        """Write a file. ``expected_version`` (0 = "must not exist yet") enables the lock.

        Raises VersionConflictError (a RuntimeError) on a mismatch, InvalidFileTypeError (a
        ValueError) for a bad kind, InvalidContentError / ContentTooLargeError for bad content.
        ``skip_unchanged`` returns the stored row untouched (``changed=False``) when the
        content is identical, so read-backs don't bump versions for nothing.
        """
        k = parse_kind(kind)
        validate_user_id(user_id)
        text = validate_content(content, self.max_content_bytes)
        with transaction(self._sessions) as session:
            repo = MemoryFileRepository(session, user_id)
            if skip_unchanged:
                current = repo.get(k.file_type)
                if current is not None and current.content == text:
                    if expected_version is not None and current.version != expected_version:
                        raise VersionConflictError(
                            user_id, k.file_type, expected_version, current.version
                        )
                    return self._file(user_id, k, current, changed=False)
            stored = self._write(repo, k, text, expected_version)
        log_event(
            logger,
            "memory.file.written",
            user_id=user_id,
            file_type=k.file_type,
            version=stored.version,
            bytes=len(text.encode("utf-8")),
        )
        return self._file(user_id, k, stored)

    def _write(
        self, repo: MemoryFileRepository, k: FileKind, text: str, expected: int | None
    ) -> StoredFile:
        if expected is None:
            return repo.upsert(k.file_type, text)
        if expected == 0:
            inserted = repo.insert_if_absent(k.file_type, text)
            if inserted is None:
                current = repo.get(k.file_type)
                raise VersionConflictError(
                    repo.user_id, k.file_type, 0, None if current is None else current.version
                )
            return inserted
        written = repo.compare_and_set(k.file_type, text, expected)
        if written is None:
            current = repo.get(k.file_type)
            raise VersionConflictError(
                repo.user_id, k.file_type, expected, None if current is None else current.version
            )
        return written

    def provision_default_files(self, user_id: str) -> list[FileKind]:
        """Template → DB for every missing file; never overwrites. Returns what it created."""
        validate_user_id(user_id)
        contents = {k: self.templates.load(k) for k in USER_FILE_KINDS}
        created: list[FileKind] = []
        with transaction(self._sessions) as session:
            repo = MemoryFileRepository(session, user_id)
            for k in USER_FILE_KINDS:
                if repo.insert_if_absent(k.file_type, contents[k]) is not None:
                    created.append(k)
        if created:
            log_event(
                logger,
                "memory.user.initialised",
                user_id=user_id,
                files=[k.filename for k in created],
                source="template",
            )
        return created

    def _file(
        self, user_id: str, kind: FileKind, stored: StoredFile, *, changed: bool = True
    ) -> MemoryFile:
        return MemoryFile(user_id, kind, stored.content, stored.version, stored.updated_at, changed)
