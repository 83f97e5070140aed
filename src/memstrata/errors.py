"""Domain exceptions: one small hierarchy that every transport maps in one place.

The spec fixes two base types: an invalid file type is a ``ValueError`` (HTTP 400) and a
version conflict is a ``RuntimeError`` (HTTP 409). Subclassing them keeps callers that
catch the builtin types working.
"""

from __future__ import annotations


class MemstrataError(Exception):
    """Base of every error memstrata raises on purpose."""


class InvalidFileTypeError(MemstrataError, ValueError):
    """The file name / kind is not one of user, soul, memory (spec: 无效的文件名)."""


class InvalidContentError(MemstrataError, ValueError):
    """Content that can never be stored (NUL characters, not text)."""


class ContentTooLargeError(InvalidContentError):
    """Content over the configured ``max_content_bytes``."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"content is {size} bytes, over the limit of {limit} bytes "
            "(shorten the file; an operator can raise MEMSTRATA_MAX_CONTENT_BYTES)"
        )
        self.size = size
        self.limit = limit


class VersionConflictError(MemstrataError, RuntimeError):
    """The caller's expected version is not the stored one (spec: RuntimeError -> 409)."""

    def __init__(
        self,
        user_id: str,
        file_type: str,
        expected: int,
        actual: int | None,
        *,
        in_progress: bool = False,
    ) -> None:
        found = "no row yet" if actual is None else f"version {actual}"
        # In progress, the stored version is still the expected one: what happened is
        # that another write from it claimed it first (first come wins).
        happened = (
            f"another write based on version {expected} already under way lands first"
            if in_progress
            else f"expected version {expected}, found {found}"
        )
        super().__init__(
            f"version conflict on {file_type}: {happened}; "
            "reload the file and apply your change again"
        )
        self.user_id = user_id
        self.file_type = file_type
        self.expected = expected
        self.actual = actual


class InvalidUserIdError(MemstrataError, ValueError):
    """A user id that is empty, too long (> 100 characters) or not text."""


class DatabaseSetupError(MemstrataError, RuntimeError):
    """The database cannot be used: unreachable, or the pgvector extension is missing."""


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


class UnknownSettingError(MemstrataError, ValueError):
    """A keyword argument of ``Settings(...)`` that names no setting (pydantic would drop
    it without a word). Unknown ``MEMSTRATA_*`` variables are a warning instead."""
