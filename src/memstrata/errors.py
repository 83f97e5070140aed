"""Domain exceptions: one small hierarchy that every transport maps in one place.

The spec fixes two base types: an invalid file type is a ``ValueError`` (HTTP 400) and a
version conflict is a ``RuntimeError`` (HTTP 409). Subclassing them keeps callers that
catch the builtin types working.
"""

from __future__ import annotations

from typing import Any, get_args

from pydantic import ValidationError
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError
from pydantic_core.core_schema import ErrorType
from pydantic_settings import SettingsError


class MemstrataError(Exception):
    """Base of every error memstrata raises on purpose."""


class InvalidFileTypeError(MemstrataError, ValueError):
    """The file name / kind is not one of user, soul, memory. Its message is English
    (``invalid file name: ...``); HTTP answers the spec's detail, 无效的文件名, verbatim."""


class InvalidContentError(MemstrataError, ValueError):
    """Content that can never be stored (NUL characters, not text). ``field``: the input
    at fault (``content``, ``query``), when the raising code knows it; HTTP's 422 names
    it in its ``errors`` item's ``loc``."""

    def __init__(self, *args: object, field: str | None = None) -> None:
        super().__init__(*args)
        self.field = field


class ContentTooLargeError(InvalidContentError):
    """Content over the configured ``max_content_bytes``; ``field``: the input that holds
    it (``content``; the page's merge checks ``base``, ``mine`` and ``theirs`` so)."""

    def __init__(self, size: int, limit: int, field: str = "content") -> None:
        super().__init__(
            f"{field} is {size} bytes, over the limit of {limit} bytes "
            "(shorten the file; an operator can raise MEMSTRATA_MAX_CONTENT_BYTES)",
            field=field,
        )
        self.size = size
        self.limit = limit


class VersionConflictError(MemstrataError, RuntimeError):
    """The caller's expected version is not the stored one (spec: RuntimeError -> 409).

    ``expected``: the version the caller based its write on; ``actual``: the version
    stored (None: no row yet; a write that lost to another one from the same version in
    this process is told the version that one stored). HTTP's 409 body calls them
    ``expected_version`` and ``current_version``, which are also properties here.
    ``user_id`` and ``file_type`` (``user_md``, ``soul_md``, ``memory_md``) say which file.
    ``same_content``: version ``actual`` holds the very text the refused write sent (a retry
    of a write that landed, its answer lost): the message says so, and HTTP's 409 body adds
    ``"same_content": true``.
    """

    def __init__(
        self,
        user_id: str,
        file_type: str,
        expected: int,
        actual: int | None,
        *,
        same_content: bool = False,
    ) -> None:
        if actual is None:
            happened = f"expected version {expected}, found no file yet"
            fix = "apply your change to an empty file, with expected version 0"
        else:
            happened = f"expected version {expected}, found version {actual}"
            fix = f"read it again and apply your change to version {actual}"
        if same_content and actual is not None:
            happened += (
                ", which holds this text already (nothing to write: a write of it landed, "
                "perhaps one whose answer was lost)"
            )
            fix = f"to change it further, {fix}"
        super().__init__(f"version conflict on {file_name(file_type)}: {happened}; {fix}")
        self.user_id = user_id
        self.file_type = file_type
        self.expected = expected
        self.actual = actual
        self.same_content = same_content and actual is not None

    @property
    def expected_version(self) -> int:
        return self.expected

    @property
    def current_version(self) -> int | None:
        return self.actual


def file_name(file_type: str) -> str:
    """``USER.md`` for ``user_md``: the name a reader knows, not the store's (every
    ``memory.kinds.FileKind`` is named so; that module imports this one)."""
    stem = file_type.removesuffix("_md")
    return f"{stem.upper()}.md" if stem and stem != file_type else file_type


class InvalidUserIdError(MemstrataError, ValueError):
    """A user id that is empty, too long (> 100 characters) or not text. ``field``: the
    argument at fault, as ``InvalidContentError``'s (``user_id``)."""

    def __init__(self, *args: object, field: str = "user_id") -> None:
        super().__init__(*args)
        self.field = field


class DatabaseSetupError(MemstrataError, RuntimeError):
    """The database cannot be used: unreachable, or the pgvector extension is missing."""


class DatabaseUnavailableError(DatabaseSetupError):
    """The database monitor finds the database lost (``db.lost``): refused at once, before
    the work would wait for it (a write's embedding requests, a search's index check)."""


class PgvectorMissingError(DatabaseSetupError):
    """pgvector is not installed on the PostgreSQL server (spec: startup/migration fails)."""


class TemplateMissingError(MemstrataError, FileNotFoundError):
    """A memory-file template is not in the template directory (``MEMSTRATA_TEMPLATE_DIR``)."""


class VectorDimensionError(MemstrataError, ValueError):
    """A vector longer than the stored 2560 dimensions."""


class EmbeddingError(MemstrataError, RuntimeError):
    """The embedding API failed; callers degrade to BM25 and log a warning."""


class EmbeddingUnavailableError(EmbeddingError):
    """The API did not answer usefully (down, hung, 5xx, circuit open): retry later."""


class EmbeddingRejectedError(EmbeddingError):
    """The API refused this input (4xx, or an unusable vector for it): never retried."""


class SandboxError(MemstrataError, RuntimeError):
    """A sandbox read/write failed; sync logs a warning and never blocks the DB write."""


class SandboxFileTooLargeError(SandboxError):
    """A sandbox file over the read limit: it is not read, so it cannot be kept aside,
    and sync leaves it in place rather than overwrite what it could not keep."""


class SandboxEncodingError(SandboxError):
    """A sandbox file that is not valid UTF-8. ``text`` is what it says with the bytes that
    do not decode replaced by U+FFFD: the copy sync keeps aside before restoring the DB's."""

    def __init__(self, message: str, text: str) -> None:
        super().__init__(message)
        self.text = text


class SandboxPathError(SandboxError, ValueError):
    """A path that escapes the sandbox (``..``, absolute, or a symlink pointing out)."""


class ProtectedFileError(MemstrataError, PermissionError):
    """A controlled tool tried to write the platform-managed root AGENTS.md."""


class BackgroundEmbeddingUnavailableError(MemstrataError, ValueError):
    """Rows stored for later embedding would never get a vector here (no worker runs)."""


class ToolInputError(MemstrataError, ValueError):
    """A tool call's arguments are unusable; the message is shown to the model."""


class UnknownSkillError(MemstrataError, LookupError):
    """No discovered skill has this name (HTTP 404)."""


class RuntimeClosedError(MemstrataError, RuntimeError):
    """A call on a ``Memstrata`` after its ``close()``: nothing was read or written. Not a
    database outage (``sandbox.reconcile.DB_ERRORS``): a closed runtime never saves
    anything later, so no caller may answer "it will be saved later"."""


class RoundsInvalidError(InvalidContentError):
    """Some conversation rounds of a call are invalid and nothing was stored; ``errors``
    has one entry per bad round, ``{"index", "session_id", "turn_index", "error",
    "field"}`` (the ids None when the round has none of that type; ``field`` the round's
    input at fault, None when no one input is), as the batch endpoint's 422 lists them.
    Also importable from ``memstrata.retrieval.rounds``, where it was first. ``field``:
    the input at fault when the call had one round (a batch's names none)."""

    def __init__(
        self, errors: list[dict[str, Any]], total: int, *, field: str | None = None
    ) -> None:
        first = errors[0]["error"] if errors else "invalid rounds"
        super().__init__(
            first
            if total == 1
            else f"{len(errors)} of {total} turns are invalid, nothing was stored; first: {first}",
            field=field if total == 1 else None,
        )
        self.errors = errors


class NoSandboxDirectoryError(MemstrataError, LookupError):
    """The runtime's sandboxes are a host's own provider: memstrata knows no directory of
    theirs (``Memstrata.sandbox_directory`` is the local provider's)."""


class UnknownSettingError(MemstrataError, ValueError):
    """A keyword argument of ``Settings(...)`` that names no setting (pydantic would drop
    it without a word). Unknown ``MEMSTRATA_*`` variables are a warning instead."""


# pydantic's own error types, which keep their context (a ValueError's cause, the bound
# of ``ge``); any other (a validator's PydanticCustomError) is carried as its message.
_PYDANTIC_ERROR_TYPES = frozenset(get_args(ErrorType))
_PYDANTIC_URL = "    For further information visit "


class InvalidSettingError(MemstrataError, ValidationError):
    """Values of ``Settings(...)`` (keyword arguments, ``MEMSTRATA_*`` variables, the
    ``.env`` file) that are no valid setting. Still pydantic's ``ValidationError`` (so a
    ``ValueError``) with pydantic's ``errors()`` and per-field report, under a first line
    naming each setting's variable; the values given are left out of the message (a
    database URL's may hold a password)."""

    @classmethod
    def of(cls, exc: ValidationError) -> InvalidSettingError:
        lines = [_init_details(error) for error in exc.errors()]
        return cls.from_exception_data(exc.title, lines, hide_input=True)

    def __str__(self) -> str:
        variables = dict.fromkeys(setting_variable(e["loc"]) for e in self.errors() if e["loc"])
        # pydantic's "For further information visit https://errors.pydantic.dev/…" lines
        # send a reader to pydantic's docs, not to the setting's.
        report = "\n".join(
            line for line in super().__str__().splitlines() if not line.startswith(_PYDANTIC_URL)
        )
        return f"invalid settings: {', '.join(variables) or 'see below'}\n{report}"


class SettingNotJSONError(InvalidSettingError, SettingsError):
    """A list or object setting whose value is not JSON (``MEMSTRATA_SKILL_DIRS='[oops'``),
    which pydantic-settings refuses before any validation with its own ``SettingsError``:
    an ``InvalidSettingError`` like every other bad value, and still a ``SettingsError``,
    so an ``except SettingsError`` written for pydantic-settings keeps catching it. Its
    one ``errors()`` entry (type ``setting_not_json``) keeps no value (``input`` None)."""

    @classmethod
    def naming(cls, field: str | None, problem: str) -> SettingNotJSONError:
        """The error of ``field`` (None: pydantic-settings named none), saying ``problem``."""
        detail: InitErrorDetails = {
            "type": PydanticCustomError("setting_not_json", problem),
            "loc": () if field is None else (field,),
            "input": None,
        }
        return cls.from_exception_data("Settings", [detail], hide_input=True)


def _init_details(error: ErrorDetails) -> InitErrorDetails:
    kind, loc, given = error["type"], error["loc"], error["input"]
    if kind not in _PYDANTIC_ERROR_TYPES:  # no context: its message is already worded
        return {"type": PydanticCustomError(kind, error["msg"]), "loc": loc, "input": given}
    details: InitErrorDetails = {"type": kind, "loc": loc, "input": given}
    if "ctx" in error:
        details["ctx"] = error["ctx"]
    return details


def setting_variable(loc: tuple[int | str, ...]) -> str:
    """``("embedding_models", 0, "name")`` is ``MEMSTRATA_EMBEDDING_MODELS[0].name``."""
    head, *inside = loc
    place = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in inside)
    return f"MEMSTRATA_{str(head).upper()}{place}"
