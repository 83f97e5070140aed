"""The memory-file kinds and their three names: API name, DB file_type, sandbox file name."""

from __future__ import annotations

from enum import Enum

from memstrata.errors import InvalidFileTypeError, InvalidUserIdError
from memstrata.text import (
    character_at,
    character_label,
    edge_whitespace,
    invisible_in_id,
    refused_id_character,
    unstorable_text,
)

USER_ID_MAX_LENGTH = 100  # user_memory.user_id is String(100)
# The largest memory file accepted by default, in UTF-8 bytes (MEMSTRATA_MAX_CONTENT_BYTES).
MAX_CONTENT_BYTES = 256 * 1024


class FileKind(Enum):
    USER = ("user", "user_md", "USER.md")
    SOUL = ("soul", "soul_md", "SOUL.md")
    MEMORY = ("memory", "memory_md", "MEMORY.md")
    # Never a user's file: AGENTS.md's source of truth is the platform template
    # (``parse_kind`` refuses it; the sandbox and the prompt use its file name).
    AGENTS = ("agents", "agents_md", "AGENTS.md")

    def __init__(self, api_name: str, file_type: str, filename: str) -> None:
        self.api_name = api_name
        self.file_type = file_type
        self.filename = filename

    @property
    def indexed(self) -> bool:
        """USER and MEMORY are searched; SOUL is persona, always in the prompt (see docs)."""
        return self in (FileKind.USER, FileKind.MEMORY)


USER_FILE_KINDS: tuple[FileKind, ...] = (FileKind.SOUL, FileKind.USER, FileKind.MEMORY)


def parse_kind(value: str | FileKind, *, allow_legacy: bool = False) -> FileKind:
    """The library's name of a memory file: a ``FileKind`` (``FileKind.USER``), the API
    name (``user``, ``soul``, ``memory``, exactly as over HTTP) or the sandbox's file name
    (``USER.md``, which sync reads back by). Any other spelling (``User``, ``user_md``,
    ``"user "``) is an ``InvalidFileTypeError`` (a ValueError), as over HTTP, and so is
    AGENTS.md under any name: it is the platform's template (``mem.templates.agents_md()``),
    never a user's row — except ``allow_legacy``, for reading the ``agents_md`` row an
    older database may still hold (the spec keeps them readable, never written), under the
    name docs/LIBRARY.md gives that read: ``FileKind.AGENTS`` or ``agents``. Any other
    spelling is refused for a read as for a write: ``get_memory_file(user, "AGENTS.md")``
    answered None, read as "no AGENTS.md yet", where the write says to read the template."""
    if isinstance(value, FileKind):
        kind = value
    elif not isinstance(value, str):
        raise InvalidFileTypeError(
            f"invalid file name: expected a string, got {type(value).__name__}"
        )
    elif value.lower() in _AGENTS_NAMES:
        kind = FileKind.AGENTS
    elif (found := _BY_NAME.get(value)) is not None:
        kind = found
    else:
        raise InvalidFileTypeError(
            f"invalid file name: {value[:100]!r} (expected one of: {_WRITABLE_NAMES}, "
            "or the file's name USER.md, SOUL.md, MEMORY.md)"
        )
    if kind is FileKind.AGENTS and not (allow_legacy and value in _LEGACY_NAMES):
        raise InvalidFileTypeError(
            "invalid file name: AGENTS.md is the platform template and is not a user file "
            "(read it with mem.templates.agents_md())"
        )
    return kind


def api_kind(name: object, *, agents: bool = False) -> FileKind:
    """Exactly ``user`` / ``soul`` / ``memory`` (the HTTP path segment, spec §3), plus
    ``agents`` — the read-only platform template — where ``agents`` allows reads of it;
    anything else, other spellings included, is ``InvalidFileTypeError`` (HTTP 400)."""
    kind = _BY_API_NAME.get(name) if isinstance(name, str) else None
    if kind is FileKind.AGENTS and not agents:
        raise InvalidFileTypeError(
            "invalid file name: AGENTS.md is the platform template and is read-only; "
            f"write one of {_WRITABLE_NAMES}"
        )
    if kind is None:
        shown = repr(name[:100]) if isinstance(name, str) else type(name).__name__
        names = f"{_WRITABLE_NAMES}, agents" if agents else _WRITABLE_NAMES
        raise InvalidFileTypeError(f"invalid file name: {shown} (expected one of: {names})")
    return kind


def model_kind(name: str) -> FileKind | None:
    """The file a language model names as it naturally writes it, or None: the API name,
    the file name or the file type in any case, after one leading ``/`` (``memory``,
    ``MEMORY.md``, ``memory.md``, ``/MEMORY.md``, ``Memory``, ``memory_md``), AGENTS.md's
    too. Each names one file only. The MCP tools' rule; HTTP's path segment stays the
    spec's exact name (:func:`api_kind`)."""
    return _BY_MODEL_NAME.get(name.removeprefix("/").lower())


class StoredUserId(str):
    """A user id the database holds rows under that ``validate_user_id`` refuses: stored
    before the rule refused control or format characters, or whitespace at its ends.
    Erasing existing data must always be possible, so the erasure
    (``memory.erase.erasable_user_id``) makes one once it has found the rows, and the
    repositories and the sandbox it erases through take it; nothing else makes one, so
    every other path keeps the rule."""

    __slots__ = ()


def validate_user_id(user_id: object) -> str:
    """``user_id`` if it is a user id, else ``InvalidUserIdError`` saying why: the one check
    every entry point makes (a token's ``sub``, ``--user``, the library). An id is compared
    byte for byte, so ``"bob\\n"`` or ``" bob"`` would be another user than ``bob``, its
    memory out of sight of ``bob``'s: surrounding whitespace, control characters and the
    characters that show as nothing or reorder the text (``text.ID_REFUSED``: ``"bob\u200b"``
    shows as ``bob``) are refused, never stripped. A ``StoredUserId`` passes as it is (an
    erasure's)."""
    if isinstance(user_id, StoredUserId):
        return user_id
    if not isinstance(user_id, str) or not user_id.strip():
        got = "" if isinstance(user_id, str) else f", got {type(user_id).__name__}"
        raise InvalidUserIdError(f"user_id must be a non-empty string{got}")
    if len(user_id) > USER_ID_MAX_LENGTH:
        raise InvalidUserIdError(f"user_id is longer than {USER_ID_MAX_LENGTH} characters")
    if (problem := unstorable_text(user_id, "user_id")) is not None:
        raise InvalidUserIdError(problem)
    if (edge := edge_whitespace(user_id)) is not None:
        raise InvalidUserIdError(
            f"user_id must not start or end with whitespace: it {edge[0]} with {edge[1]}; remove it"
        )
    if (refused := refused_id_character(user_id)) is not None:
        at, named = refused
        if invisible_in_id(user_id[at]):
            raise InvalidUserIdError(
                f"user_id must not contain invisible or bidirectional format characters: "
                f"{character_at(at)} is {named}; remove it"
            )
        raise InvalidUserIdError(
            "user_id must not contain control characters or line separators: "
            f"{character_at(at)} is {character_label(user_id[at])}"
        )
    return user_id


_BY_NAME: dict[str, FileKind] = {
    name: kind for kind in USER_FILE_KINDS for name in (kind.api_name, kind.filename)
}
_AGENTS_NAMES = {
    n.lower()
    for n in (FileKind.AGENTS.api_name, FileKind.AGENTS.file_type, FileKind.AGENTS.filename)
}
# The names a legacy ``agents_md`` row is read by (parse_kind's allow_legacy).
_LEGACY_NAMES: tuple[str | FileKind, ...] = (FileKind.AGENTS, FileKind.AGENTS.api_name)
_BY_API_NAME: dict[str, FileKind] = {kind.api_name: kind for kind in FileKind}
_BY_MODEL_NAME: dict[str, FileKind] = {
    name.lower(): kind
    for kind in FileKind
    for name in (kind.api_name, kind.file_type, kind.filename)
}
_WRITABLE_NAMES = ", ".join(kind.api_name for kind in USER_FILE_KINDS)
