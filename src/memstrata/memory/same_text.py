"""Whether a memory-file write of the text the file holds already is answered with the
stored file, nothing written, or refused as stale: the one rule of every writer (REST PUT,
MCP ``memory_write``, the read-backs, the library), by the store's
``same_text_stale_version`` (``MEMSTRATA_SAME_TEXT_STALE_VERSION``).

On the current version (or none) such a write changes nothing and is no conflict. On an
older one it is the spec's conflict by default (``"conflict"``), its ``same_content`` saying
that the file holds the text (a retry of a write that landed, its answer lost, knows it
has nothing left to do); ``"unchanged"`` answers it with the stored file instead.
"""

from __future__ import annotations

from typing import Protocol, cast, get_args

from memstrata.config_storage import SameTextStaleVersion
from memstrata.errors import VersionConflictError
from memstrata.memory.kinds import FileKind


class HasContent(Protocol):
    """What :func:`holds_text` reads of a file (a ``StoredFile`` or a ``MemoryFile``)."""

    @property
    def content(self) -> str: ...


def holds_text(stored: HasContent | None, text: str | None) -> bool:
    """Whether writing ``text`` over ``stored`` (None: no file yet) would change nothing:
    the version and the embeddings change only when the text does. Whether such a write
    is answered so, or refused as stale, is :func:`unchanged_write`'s."""
    return stored is not None and text is not None and stored.content == text


class HasVersion(HasContent, Protocol):
    """What :func:`unchanged_write` reads of a file (a ``StoredFile`` or a ``MemoryFile``)."""

    @property
    def version(self) -> int: ...


def unchanged_write(
    stored: HasVersion | None, text: str, expected: int | None, rule: SameTextStaleVersion
) -> bool:
    """Whether a write of ``text`` based on ``expected`` (None: no version check) over
    ``stored`` is answered with ``stored``, nothing written: the one rule of every writer
    (REST PUT, MCP ``memory_write``, the read-backs, the library). It holds the text and
    the write is not stale (the same request twice on the current version), or, with
    ``rule`` ``"unchanged"`` (``MEMSTRATA_SAME_TEXT_STALE_VERSION``), on any version. By
    default (``"conflict"``) a stale version is the spec's conflict even then:
    :func:`stale_write` tells it that the file holds its text."""
    if stored is None or not holds_text(stored, text):
        return False
    return expected is None or expected == stored.version or rule == "unchanged"


def stale_write(
    user_id: str, kind: FileKind, expected: int, stored: HasVersion | None, text: str | None
) -> VersionConflictError:
    """The conflict of a write of ``text`` based on ``expected`` over ``stored`` (None: no
    file yet), saying whether the stored version holds that text (``same_content``)."""
    actual = None if stored is None else stored.version
    same = holds_text(stored, text)
    return VersionConflictError(user_id, kind.file_type, expected, actual, same_content=same)


def same_text_rule(value: object) -> SameTextStaleVersion:
    """``value`` if it is a ``same_text_stale_version``, else a ``ValueError`` naming them."""
    if isinstance(value, str) and value in get_args(SameTextStaleVersion):
        return cast(SameTextStaleVersion, value)
    names = " or ".join(repr(rule) for rule in get_args(SameTextStaleVersion))
    raise ValueError(f"same_text_stale_version must be {names}; got {value!r:.40}")
