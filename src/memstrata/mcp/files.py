"""The memory files over MCP: read (tools and resources) and write (``memory_write``).

Reads are REST ``GET /api/config/agent-files/{name}``'s: the DB copy, and a user with no
files yet is provisioned from the templates first. ``agents`` is the platform template
(read-only, no version). The write is REST ``PUT``'s one service call
(:func:`write_file`), so the size / NUL rules and their messages are the store's own; a
stale version is answered in the model's terms (the file's name, the call to make).

A file is named as a model writes it (:func:`~memstrata.memory.kinds.model_kind`:
``MEMORY.md``, ``memory.md``, ``/MEMORY.md``, ``Memory`` …), and any other name is refused
in English with the closest name (:func:`tool_kind`). HTTP keeps the spec's exact names
and its ``无效的文件名``: a model has no spec to read, only this answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from memstrata.agent.sections import close_names
from memstrata.errors import ContentTooLargeError, InvalidContentError, VersionConflictError
from memstrata.mcp.base import Caller, ToolError
from memstrata.memory.kinds import USER_FILE_KINDS, FileKind, model_kind
from memstrata.memory.store import MemoryFile, check_expected_version, validate_content

URI_PREFIX = "memstrata://files/"
URI_TEMPLATE = URI_PREFIX + "{name}"
MIME_TYPE = "text/markdown"
WRITABLE_NAMES = tuple(kind.api_name for kind in USER_FILE_KINDS)  # soul, user, memory
READABLE_NAMES = (*WRITABLE_NAMES, FileKind.AGENTS.api_name)
# structuredContent's ``error`` for a name that is no memory file (REST's code).
INVALID_FILE_NAME = "invalid_file_name"
_SHOWN_CHARS = 100  # of a refused name, as the refusal quotes it


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


async def stored_file(caller: Caller, kind: FileKind) -> MemoryFile | None:
    """The DB copy as it is, None if the user has none: no provisioning, which would give
    a write with ``expected_version`` 0 a version to conflict with."""
    return await caller.mem.sync.db.get(caller.user_id, kind)


async def write_file(caller: Caller, kind: FileKind, content: str, expected: int) -> MemoryFile:
    """REST PUT's write path: DB → embeddings → sandbox (forced) → AgentPool eviction.

    The one call site of that path here, so that it can be re-pointed in one place.
    """
    try:
        return await caller.mem.sync.frontend_edit(
            caller.user_id, kind, content, expected_version=expected
        )
    except VersionConflictError as exc:
        # ``same_content`` only when true, as in REST's 409 body.
        same = {"same_content": True} if exc.same_content else {}
        raise ToolError(
            version_conflict(kind, exc.expected, exc.actual, same_content=exc.same_content),
            {
                "error": "version_conflict",
                "expected_version": exc.expected,
                "current_version": exc.actual,
                **same,
            },
        ) from exc
    except InvalidContentError as exc:  # ContentTooLargeError too
        raise _content_refused(exc) from exc


def check_content(caller: Caller, content: str) -> None:
    """The store's content rules (size, NUL, valid Unicode), which the write checks first,
    as a ``ToolError``: before a tool's own checks, so that a model is never told to fix
    those only to be refused for this."""
    try:
        validate_content(content, caller.mem.store.max_content_bytes)
    except InvalidContentError as exc:  # ContentTooLargeError too
        raise _content_refused(exc) from exc


def check_version(expected: int) -> None:
    """The store's rule for a version (:func:`check_expected_version`) as a ``ToolError``,
    before the guard compares it: the tool requires one, so the refusal does not offer
    to leave it out, as the library's does."""
    try:
        check_expected_version(expected, required=True)
    except InvalidContentError as exc:
        raise ToolError(str(exc)) from exc


def _content_refused(exc: InvalidContentError) -> ToolError:
    too_large = isinstance(exc, ContentTooLargeError)
    return ToolError(str(exc), {"error": "content_too_large" if too_large else "invalid_content"})


def version_conflict(
    kind: FileKind, expected: int, actual: int | None, *, same_content: bool = False
) -> str:
    """A stale ``expected_version``'s refusal, in the model's terms: the file's name (not
    the store's ``soul_md``) and the one call that resolves it. ``actual`` equal to
    ``expected``: another write from that version was under way and landed first.
    ``same_content``: version ``actual`` holds the text sent, so the model's write is
    stored (an earlier try of it landed) and there is nothing to do."""
    if same_content and actual is not None:
        return (
            f"version conflict on {kind.filename}: expected version {expected}, found version "
            f"{actual}, which holds this text already: your write is stored (an earlier try "
            "of it landed), nothing to do. To change the file further, write on "
            f"expected_version={actual}."
        )
    if actual == expected:
        happened = f"another write based on version {expected} landed first"
        version = "the version it returns"
    else:
        found = "no file yet" if actual is None else f"version {actual}"
        happened = f"expected version {expected}, found {found}"
        version = f"expected_version={actual or 0}"
    return (
        f"version conflict on {kind.filename}: {happened}. Call memory_read "
        f"(name={kind.api_name!r}), apply your change to the text it returns and write again "
        f"with {version}."
    )


def tool_kind(name: str, *, agents: bool) -> FileKind:
    """The file a tool's ``name`` argument names (:func:`~memstrata.memory.kinds.model_kind`),
    else a ``ToolError`` saying which names there are and the closest; AGENTS.md is
    refused unless ``agents`` (a read)."""
    kind = model_kind(name)
    if kind is FileKind.AGENTS and not agents:
        raise ToolError(
            f"AGENTS.md is the platform template and is read-only; {_names(agents)}",
            {"error": INVALID_FILE_NAME},
        )
    if kind is None:
        raise ToolError(unknown_name(name, agents=agents), {"error": INVALID_FILE_NAME})
    return kind


def unknown_name(name: str, *, agents: bool) -> str:
    """What a name that is no memory file gets: the closest name (two edits at most, as
    section names are matched: :func:`~memstrata.agent.sections.close_names`) and every
    name there is."""
    stem = name.removeprefix("/")
    stem = stem[: -len(".md")] if stem.lower().endswith(".md") else stem
    close = close_names(stem, list(READABLE_NAMES if agents else WRITABLE_NAMES))
    guess = f"; did you mean {close[0]!r}?" if close else ";"
    return f"no memory file is named {name[:_SHOWN_CHARS]!r}{guess} {_names(agents)}"


def _names(agents: bool) -> str:
    kinds = [*USER_FILE_KINDS, FileKind.AGENTS] if agents else list(USER_FILE_KINDS)
    listed = ", ".join(
        f"{kind.api_name} ({kind.filename}{', read-only' if kind is FileKind.AGENTS else ''})"
        for kind in kinds
    )
    return f"name is one of {listed}"


def _view(file: MemoryFile) -> FileView:
    kind = file.kind
    return FileView(kind.api_name, kind.file_type, kind.filename, file.content, file.version, False)


def uri(kind: FileKind) -> str:
    return URI_PREFIX + kind.api_name


def kind_from_uri(value: str) -> FileKind | None:
    """The file a ``memstrata://files/{name}`` URI names, ``name`` as the tools take it;
    None for a URI of another form. One of this form naming no file is ``-32602`` with the
    closest name (:func:`unknown_name`)."""
    if not value.startswith(URI_PREFIX):
        return None
    name = value[len(URI_PREFIX) :]
    kind = model_kind(name)
    if kind is None:
        raise MCPError(
            INVALID_PARAMS,
            f"unknown resource {value[:200]!r}: {unknown_name(name, agents=True)}",
        )
    return kind
