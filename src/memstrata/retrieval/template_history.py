"""The template paragraphs a memory file is compared with (retrieval.scaffold): the
current template's and those of every template this deployment provisioned from before.

A platform that edits its USER.md / MEMORY.md templates leaves its older users with the
old template's paragraphs. Compared with the current template alone, those untouched
paragraphs would be indexed as resident content at the user's next write — the
boilerplate the scaffold rule exists to keep out. So each runtime records the paragraphs
of the templates it provisions from (``memory_template_paragraphs``, migration 0008) when
it opens, and compares with all of them.
"""

from __future__ import annotations

import hashlib
import logging
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


class TemplateScaffold:
    def __init__(self, sessions: sessionmaker[Session], templates: TemplateSet) -> None:
        self._sessions = sessions
        self._templates = templates
        self._recorded: dict[str, frozenset[str]] = {}

    def record(self, kinds: Iterable[FileKind]) -> None:
        """Add the current templates' paragraphs of ``kinds`` to the recorded ones and read
        them all back (once per process: templates change with a deploy). A database
        error leaves the comparison with the current templates only, and is logged."""
        rows = [
            {"t": kind.file_type, "h": _hash(key), "p": key}
            for kind in kinds
            for key in scaffold_keys(self._templates.load(kind))
        ]
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
        return scaffold_keys(self._templates.load(kind)) | self._recorded.get(
            kind.file_type, frozenset()
        )


def _hash(paragraph: str) -> str:
    return hashlib.sha256(paragraph.encode("utf-8")).hexdigest()
