"""The memory files over MCP: read (tools and resources) and write (``memory_write``).

Reads are REST ``GET /api/config/agent-files/{name}``'s: the DB copy, and a user with no
files yet is provisioned from the templates first. ``agents`` is the platform template
(read-only, no version). The write is REST ``PUT``'s one service call
(:func:`write_file`), so the size / NUL / version rules and their messages are the
store's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memstrata.errors import (
    ContentTooLargeError,
    InvalidContentError,
    InvalidFileTypeError,
    VersionConflictError,
)
from memstrata.mcp.base import Caller, ToolError
from memstrata.memory.kinds import USER_FILE_KINDS, FileKind, api_kind
from memstrata.memory.store import MemoryFile

URI_PREFIX = "memstrata://files/"
URI_TEMPLATE = URI_PREFIX + "{name}"
MIME_TYPE = "text/markdown"
WRITABLE_NAMES = tuple(kind.api_name for kind in USER_FILE_KINDS)  # soul, user, memory
READABLE_NAMES = (*WRITABLE_NAMES, FileKind.AGENTS.api_name)


@dataclass(frozen=True)
class FileView:
    name: str
    file_type: str
    filename: str
    content: str
    version: int | None  # None: AGENTS.md, the platform template, has no version
    read_only: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "file_type": self.file_type,
            "content": self.content,
            "version": self.version,
            "read_only": self.read_only,
        }


def resource_meta(view: FileView) -> dict[str, Any]:
    """A file resource's ``_meta``: its version (AGENTS.md has none) and whether it is
    read-only. Never a null value: the SDK sends a 2026-07-28 result without the nulls in its
    ``_meta`` and a handshake-era one with them, so a ``version: null`` would be there in one
    protocol era and missing in the other."""
    version = {} if view.version is None else {"version": view.version}
    return {**version, "read_only": view.read_only}


async def read_file(caller: Caller, kind: FileKind) -> FileView:
    mem, user_id = caller.mem, caller.user_id
    if kind is FileKind.AGENTS:
        text = mem.templates.agents_md()
        return FileView(kind.api_name, kind.file_type, kind.filename, text, None, True)
    file, _ = await mem.sync.read_file(user_id, kind)
    return _view(file)


async def write_file(caller: Caller, kind: FileKind, content: str, expected: int) -> MemoryFile:
    """REST PUT's write path: DB → embeddings → sandbox (forced) → AgentPool eviction.

    The one call site of that path here, so that it can be re-pointed in one place.
    """
    try:
        return await caller.mem.sync.frontend_edit(
            caller.user_id, kind, content, expected_version=expected
        )
    except VersionConflictError as exc:
        current = 0 if exc.actual is None else exc.actual
        raise ToolError(
            f"{exc}. Call memory_read (name={kind.api_name!r}) to re-read the current "
            f"version, apply your change to it and write again with expected_version={current}.",
            {
                "error": "version_conflict",
                "expected_version": exc.expected,
                "current_version": exc.actual,
            },
        ) from exc
    except ContentTooLargeError as exc:
        raise ToolError(str(exc), {"error": "content_too_large"}) from exc
    except InvalidContentError as exc:
        raise ToolError(str(exc), {"error": "invalid_content"}) from exc


def _view(file: MemoryFile) -> FileView:
    kind = file.kind
    return FileView(kind.api_name, kind.file_type, kind.filename, file.content, file.version, False)


def uri(kind: FileKind) -> str:
    return URI_PREFIX + kind.api_name


def kind_from_uri(value: str) -> FileKind | None:
    if not value.startswith(URI_PREFIX):
        return None
    try:
        return api_kind(value[len(URI_PREFIX) :], agents=True)
    except InvalidFileTypeError:
        return None
