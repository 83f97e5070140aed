"""The memory-file kinds and their three names: API name, DB file_type, sandbox file name."""

from __future__ import annotations

from enum import Enum

from memstrata.errors import InvalidFileTypeError, InvalidUserIdError
from memstrata.text import lone_surrogate_at

USER_ID_MAX_LENGTH = 100  # user_memory.user_id is String(100)
# The largest memory file accepted by default, in UTF-8 bytes (MEMSTRATA_MAX_CONTENT_BYTES).
MAX_CONTENT_BYTES = 256 * 1024


class FileKind(Enum):
    USER = ("user", "user_md", "USER.md")
    SOUL = ("soul", "soul_md", "SOUL.md")
    MEMORY = ("memory", "memory_md", "MEMORY.md")
    # Legacy rows only: AGENTS.md's source of truth is the platform template.
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
    """Accept ``user`` / ``user_md`` / ``USER.md`` (and the enum); anything else is a ValueError."""
    if isinstance(value, FileKind):
        kind = value
    else:
        if not isinstance(value, str):
            raise InvalidFileTypeError(
                f"无效的文件名: expected a string, got {type(value).__name__}"
            )
        kind_or_none = _BY_NAME.get(value.strip().lower())
        if kind_or_none is None:
            raise InvalidFileTypeError(
                f"无效的文件名: {value!r} (expected one of: user, soul, memory)"
            )
        kind = kind_or_none
    if kind is FileKind.AGENTS and not allow_legacy:
        raise InvalidFileTypeError(
            "无效的文件名: AGENTS.md is the platform template and is not a user file"
        )
    return kind


def api_kind(name: object, *, agents: bool = False) -> FileKind:
    """Exactly ``user`` / ``soul`` / ``memory`` (the HTTP path segment, spec §3), plus
    ``agents`` — the read-only platform template — where ``agents`` allows reads of it;
    anything else, other spellings included, is ``InvalidFileTypeError`` (HTTP 400)."""
    kind = _BY_API_NAME.get(name) if isinstance(name, str) else None
    if kind is FileKind.AGENTS and not agents:
        raise InvalidFileTypeError(
            "无效的文件名: AGENTS.md is the platform template and is read-only; "
            f"write one of {_WRITABLE_NAMES}"
        )
    if kind is None:
        shown = repr(name[:100]) if isinstance(name, str) else type(name).__name__
        names = f"{_WRITABLE_NAMES}, agents" if agents else _WRITABLE_NAMES
        raise InvalidFileTypeError(f"无效的文件名: {shown} (expected one of: {names})")
    return kind


def validate_user_id(user_id: object) -> str:
    if not isinstance(user_id, str) or not user_id.strip():
        raise InvalidUserIdError("user_id must be a non-empty string")
    if len(user_id) > USER_ID_MAX_LENGTH:
        raise InvalidUserIdError(f"user_id is longer than {USER_ID_MAX_LENGTH} characters")
    if "\x00" in user_id:
        raise InvalidUserIdError("user_id must not contain NUL characters")
    if lone_surrogate_at(user_id) is not None:
        raise InvalidUserIdError("user_id is not valid Unicode: it contains a lone surrogate")
    return user_id


_BY_NAME: dict[str, FileKind] = {
    name.lower(): kind
    for kind in FileKind
    for name in (kind.api_name, kind.file_type, kind.filename)
}
_BY_API_NAME: dict[str, FileKind] = {kind.api_name: kind for kind in FileKind}
_WRITABLE_NAMES = ", ".join(kind.api_name for kind in USER_FILE_KINDS)
