"""The memory-file service: the one write path for SOUL/USER/MEMORY, plus reads.

Every writer — the REST PUT, the agent tools, the round-end read-back (all through
``memstrata.sandbox.sync``) — ends in :meth:`MemoryStore.upsert_memory_file`, which has one
shape (docs/ARCHITECTURE.md, "The write path"):

1. validate, then check the caller's expected version against the stored one: a stale
   version is a ``VersionConflictError`` (HTTP 409) at once, before any embedding work —
   also when the file holds the write's text already, unless the store's
   ``same_text_stale_version`` is ``"unchanged"`` (:func:`unchanged_write`);
2. chunk and embed the new text (USER/MEMORY only) outside any lock or transaction —
   where the background worker runs, for at most the file budget (``retrieval.file_budget``:
   the rest is stored without a vector and the worker, told once the write committed,
   embeds it);
3. one short transaction that re-checks the version (a conditional ``UPDATE``) and stores
   the text, the new version, and the file's search rows with their vectors.

The follow-on effects (the sandbox mirror, the AgentPool notification) are the async
sync layer's, run in order after this returns. The database is the source of truth.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from memstrata.config_storage import SAME_TEXT_STALE_VERSION, SameTextStaleVersion
from memstrata.db.engine import transaction
from memstrata.db.integers import MAX_INT
from memstrata.errors import (
    ContentTooLargeError,
    DatabaseUnavailableError,
    InvalidContentError,
    VersionConflictError,
)
from memstrata.logs import describe, log_event, log_failure
from memstrata.memory.kinds import MAX_CONTENT_BYTES, USER_FILE_KINDS, FileKind, parse_kind
from memstrata.memory.repository import MemoryFileRepository, StoredFile
from memstrata.memory.same_text import holds_text as holds_text
from memstrata.memory.same_text import same_text_rule, stale_write, unchanged_write
from memstrata.memory.templates import TemplateSet
from memstrata.text import unstorable_text

logger = logging.getLogger(__name__)


class StagedRows(Protocol):
    """A file's search rows, embedded and ready to store in the caller's transaction;
    ``committed`` once it has (rows left without a vector are the background worker's)."""

    def apply(self, session: Session) -> object: ...

    def committed(self) -> None: ...


class FileIndexer(Protocol):
    """Stages USER/MEMORY search rows (``memstrata.retrieval.indexer.Indexer``)."""

    def stage_memory_file(
        self, user_id: str, kind: FileKind, content: str, *, embed: bool = True
    ) -> StagedRows: ...

    # The template paragraphs it leaves out of a ``kind`` file (None: none known), which
    # the agent tools' rewrite guard exempts too.
    def template_paragraphs(self, kind: FileKind) -> Collection[str] | None: ...


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


def check_expected_version(value: object, *, required: bool = False) -> int | None:
    """``value`` if it is a version a file can have, or None where the version is not
    ``required``; else ``InvalidContentError`` (a library caller's ``"1"`` or ``True`` must
    not reach the comparisons). Its words are read over HTTP and MCP too: "left out", not
    Python's None, and only where it may be (MCP's ``memory_write`` requires it)."""
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
        absent = "" if required else ", or left out"
        raise InvalidContentError(
            f"expected_version must be an integer from 0 (the file must not exist yet) to "
            f"{MAX_INT}{absent}; got {value!r}",
            field="expected_version",
        )
    return value


def validate_content(content: object, max_bytes: int, field: str = "content") -> str:
    """``content`` if a file can hold it: a string without NUL or lone surrogates, at most
    ``max_bytes`` in UTF-8. ``field``: the input's name, which the refusal starts with
    and names as its field (the page's merge checks its ``base``, ``mine`` and ``theirs``
    by this rule)."""
    if not isinstance(content, str):
        raise InvalidContentError(
            f"{field} must be a string, got {type(content).__name__}", field=field
        )
    if (problem := unstorable_text(content, field)) is not None:
        raise InvalidContentError(problem, field=field)
    size = len(content.encode("utf-8"))
    if size > max_bytes:
        raise ContentTooLargeError(size, max_bytes, field)
    return content


class MemoryStore:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        templates: TemplateSet,
        max_content_bytes: int = MAX_CONTENT_BYTES,
        *,
        indexer: FileIndexer | None = None,
        same_text_stale_version: SameTextStaleVersion = SAME_TEXT_STALE_VERSION,
    ) -> None:
        self._sessions = sessions
        self.templates = templates
        self.max_content_bytes = max_content_bytes
        self.indexer = indexer
        # Every writer reads it here (:func:`unchanged_write`): REST, MCP and the library
        # answer a stale write of the stored text alike.
        self.same_text_stale_version = same_text_rule(same_text_stale_version)

    @property
    def sessions(self) -> sessionmaker[Session]:
        """The database it stores in (the sandbox's ``sandbox_synced`` notes share it)."""
        return self._sessions

    def get_memory_file(self, user_id: str, kind: str | FileKind) -> MemoryFile | None:
        """The stored file, or None when the user has none yet. ``kind`` as
        :func:`~memstrata.memory.kinds.parse_kind` takes it; ``agents`` reads only a legacy
        ``agents_md`` row from an older database (None without one): AGENTS.md itself is the
        platform's template, ``mem.templates.agents_md()``."""
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
        skip_unchanged: bool = True,
    ) -> MemoryFile:
        """Write a file. ``expected_version`` (0 = "must not exist yet") enables the lock.

        Raises VersionConflictError (a RuntimeError) on a mismatch, InvalidFileTypeError (a
        ValueError) for a bad kind, InvalidContentError / ContentTooLargeError for bad content.
        A write of the text the file holds already returns the stored row untouched
        (``changed=False``: no new version, no embedding) when ``expected_version`` is the
        stored one or None; on an older one it is a VersionConflictError whose
        ``same_content`` is true, unless ``same_text_stale_version`` is ``"unchanged"``
        (:func:`unchanged_write`). ``skip_unchanged=False`` makes a new version of the same
        text all the same.
        """
        k = parse_kind(kind)
        text = validate_content(content, self.max_content_bytes)
        check_expected_version(expected_version)
        # 1. Version first: a stale caller gets its conflict without waiting on embeddings.
        # (The repository validates the user id before any query.)
        current = self._stored(user_id, k)
        rule = self.same_text_stale_version
        if skip_unchanged and unchanged_write(current, text, expected_version, rule):
            assert current is not None  # it holds the text
            return self._file(user_id, k, current, changed=False)
        if expected_version is not None and _version(current) != expected_version:
            raise stale_write(user_id, k, expected_version, current, text)
        # 2. Chunk and embed outside any lock or transaction.
        staged = self._stage(user_id, k, text)
        # 3. One short transaction: re-check the version, store text, version and rows.
        try:
            with transaction(self._sessions) as session:
                repo = MemoryFileRepository(session, user_id)
                stored = self._write(repo, k, text, expected_version)
                if staged is not None:
                    staged.apply(session)
        except VersionConflictError:
            if expected_version is None:
                raise
            # Lost the race: to a write of the same text (two tries of one request at once),
            # whose outcome is this one's where the rule lets a stale write be unchanged,
            # else a conflict that says whether the winner stored this very text.
            won = self._stored(user_id, k)
            if skip_unchanged and unchanged_write(won, text, expected_version, rule):
                assert won is not None  # it holds the text
                return self._file(user_id, k, won, changed=False)
            raise stale_write(user_id, k, expected_version, won, text) from None
        if staged is not None:
            staged.committed()
        log_event(
            logger,
            "memory.file.written",
            user_id=user_id,
            file_type=k.file_type,
            version=stored.version,
            bytes=len(text.encode("utf-8")),
        )
        return self._file(user_id, k, stored)

    def edit_memory_file(
        self, user_id: str, kind: str | FileKind, edit: Callable[[str], str], *, attempts: int = 3
    ) -> MemoryFile:
        """Apply ``edit`` to the stored text ("" when absent) through the write path; when
        another writer wins the race, again on the fresh copy. ``VersionConflictError``
        after ``attempts`` lost races; exceptions raised by ``edit`` propagate.
        ``attempts`` below 1 (or not an integer) is an ``InvalidContentError``."""
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise InvalidContentError(
                f"attempts must be an integer of at least 1, got {attempts!r:.60}",
                field="attempts",
            )
        for attempt in range(attempts):
            current = self.get_memory_file(user_id, kind)
            new = edit("" if current is None else current.content)
            expected = 0 if current is None else current.version
            try:
                return self.upsert_memory_file(user_id, kind, new, expected)
            except VersionConflictError:
                if attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _stored(self, user_id: str, kind: FileKind) -> StoredFile | None:
        with self._sessions() as session:
            return MemoryFileRepository(session, user_id).get(kind.file_type)

    def _stage(self, user_id: str, kind: FileKind, text: str) -> StagedRows | None:
        """The file's search rows, or None: not indexed, no indexer, or staging failed.

        Failure policy: a database error propagates (the write would fail too). Anything
        else (an outage is no failure here: its rows are staged without vectors already)
        and the rows are staged again without embedding, as in an outage: BM25 finds
        them, the background worker embeds them (``sync.index_unembedded``). Should that
        fail too, the file is stored without new rows (``sync.index_failed``) — ``memstrata
        reindex`` or the next write rebuilds them. The write never depends on the index.
        """
        if self.indexer is None or not kind.indexed:
            return None
        try:
            return self.indexer.stage_memory_file(user_id, kind, text)
        except (SQLAlchemyError, DatabaseUnavailableError):  # the monitor's db.lost too
            raise
        except Exception as exc:
            failed = exc
        where = {"user_id": user_id, "file": kind.filename}
        try:
            staged = self.indexer.stage_memory_file(user_id, kind, text, embed=False)
        except (SQLAlchemyError, DatabaseUnavailableError):
            raise
        except Exception as again:
            log_failure(
                logger,
                "sync.index_failed",
                failed,
                **where,
                without_vectors=describe(again),
                effect="stored without search rows: `memstrata reindex --user USER` or the "
                "file's next write rebuilds them",
            )
            return None
        log_failure(
            logger,
            "sync.index_unembedded",
            failed,
            **where,
            effect="rows stored without vectors: BM25 finds them, the background worker "
            "embeds them",
        )
        return staged

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
        contents = {k: self.templates.load(k) for k in USER_FILE_KINDS}
        with self._sessions() as session:
            present = {f.file_type for f in MemoryFileRepository(session, user_id).list()}
        staged = {
            k: self._stage(user_id, k, contents[k])
            for k in USER_FILE_KINDS
            if k.file_type not in present
        }
        created: list[FileKind] = []
        with transaction(self._sessions) as session:
            repo = MemoryFileRepository(session, user_id)
            for k in USER_FILE_KINDS:
                if repo.insert_if_absent(k.file_type, contents[k]) is not None:
                    created.append(k)
                    rows = staged.get(k)
                    if rows is not None:
                        rows.apply(session)
        for k in created:
            if (rows := staged.get(k)) is not None:
                rows.committed()
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


def _version(stored: StoredFile | None) -> int:
    """The stored version; 0 for "no row yet", which is what ``expected_version=0`` means."""
    return 0 if stored is None else stored.version
