"""The template paragraphs a memory file is compared with (retrieval.scaffold): the
current template's and those of every template this deployment provisioned from before.

A platform that edits its USER.md / MEMORY.md templates leaves its older users with the
old template's paragraphs. Compared with the current template alone, those untouched
paragraphs would be indexed as resident content at the user's next write — the
boilerplate the scaffold rule exists to keep out. So each runtime records the paragraphs
of the templates it provisions from (``memory_template_paragraphs``, migration 0008) when
it opens, and compares with all of them. During a rolling deploy of new templates the
replicas still running the old ones learn the new paragraphs by reading the table again,
at most every ``REREAD_S``.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterable

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from memstrata.db.engine import transaction
from memstrata.logs import log_failure
from memstrata.memory.kinds import FileKind
from memstrata.memory.templates import TemplateSet
from memstrata.retrieval.scaffold import scaffold_keys

logger = logging.getLogger(__name__)

# How stale this process's copy of the recorded paragraphs may get: a replica that opened
# before another recorded a newer template indexes that template's paragraphs as content
# for at most this long. Reading costs one small query per interval, on a memory-file write.
REREAD_S = 60.0


class TemplateScaffold:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        templates: TemplateSet,
        reread_s: float = REREAD_S,
    ) -> None:
        self._sessions = sessions
        self._templates = templates
        self._reread_s = reread_s
        self._kinds: tuple[FileKind, ...] = ()
        self._recorded: dict[str, frozenset[str]] = {}
        self._read_at = float("-inf")  # time.monotonic()

    def record(self, kinds: Iterable[FileKind]) -> None:
        """Add the current templates' paragraphs of ``kinds`` to the recorded ones and read
        them all back; ``keys`` does it again every ``reread_s``, which also retries a
        record that failed. A database error leaves the comparison with what was read
        last (at worst the current templates only), and is logged."""
        self._kinds = tuple(kinds)
        # Before the query: a failing database is then not asked again on every write.
        self._read_at = time.monotonic()
        rows = []
        for kind in self._kinds:
            try:
                keys = scaffold_keys(self._templates.load(kind))
            except OSError as exc:  # this file's writes say so (keys); the others go on
                log_failure(logger, "index.template_unreadable", exc, file_type=kind.file_type)
                continue
            rows += [{"t": kind.file_type, "h": _hash(key), "p": key} for key in keys]
        try:
            with transaction(self._sessions) as session:
                if rows:
                    session.execute(
                        text(
                            "INSERT INTO memory_template_paragraphs (file_type, paragraph_hash, "
                            "paragraph) VALUES (:t, :h, :p) ON CONFLICT DO NOTHING"
                        ),
                        rows,
                    )
                found: dict[str, set[str]] = {}
                for file_type, paragraph in session.execute(
                    text("SELECT file_type, paragraph FROM memory_template_paragraphs")
                ):
                    found.setdefault(file_type, set()).add(paragraph)
        except SQLAlchemyError as exc:
            log_failure(logger, "index.template_history_unavailable", exc)
            return
        self._recorded = {file_type: frozenset(keys) for file_type, keys in found.items()}

    def keys(self, kind: FileKind) -> frozenset[str]:
        """The paragraphs not indexed in a file of ``kind``. ``OSError`` when its current
        template cannot be read."""
        if time.monotonic() - self._read_at >= self._reread_s:
            self.record(self._kinds)
        return scaffold_keys(self._templates.load(kind)) | self._recorded.get(
            kind.file_type, frozenset()
        )


def _hash(paragraph: str) -> str:
    return hashlib.sha256(paragraph.encode("utf-8")).hexdigest()
