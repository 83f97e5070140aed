"""The sandbox interface and the pure path rules every sandbox shares.

A sandbox is the agent's workspace: a directory tree with the memory files (USER.md,
MEMORY.md, SOUL.md, AGENTS.md) at its root. The database is the source of truth for the
user's files; the sandbox is the copy the agent edits, synced back by the sync layer.

Paths given to a sandbox are relative to its root, use ``/`` as the separator and are
normalised lexically (``./USER.md`` and ``notes/../USER.md`` are ``USER.md``). Anything that
would leave the root is refused with :class:`~memstrata.errors.SandboxPathError`.
"""

from __future__ import annotations

import builtins
import codecs
import contextlib
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from memstrata.errors import ProtectedFileError, SandboxPathError
from memstrata.memory.kinds import FileKind

DEFAULT_WORKSPACE_PREFIXES: tuple[str, ...] = ("/workspace",)
_UTF16_MARKS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


class Sandbox(Protocol):
    """One user's (or one session's) workspace. Every method may raise ``SandboxError``.

    ``Memstrata.open`` gives each call a deadline (``MEMSTRATA_SANDBOX_TIMEOUT_S``, see
    :mod:`memstrata.sandbox.timed`): a call still running then is cancelled and counted as
    a ``SandboxError``, so a method should be cancellable (plain ``await`` on its client)
    and safe to cancel at any ``await``.
    """

    @property
    def case_sensitive(self) -> bool:
        """Whether ``user.md`` and ``USER.md`` are two files here (see ``root_memory_file``);
        report ``False`` when unsure: also matching ``agents.md`` is the safe mistake."""
        ...

    async def read_text(self, path: str) -> str | None:
        """The file's text (:func:`decode_text`: strict UTF-8, or UTF-16 after a UTF-16
        byte-order mark); ``None`` when no file is there. Raise ``SandboxEncodingError``
        with an :class:`Undecodable` of the file's bytes when it is neither."""
        ...

    async def write_text(self, path: str, content: str) -> None:
        """Replace the file atomically, creating parent directories as needed. ``content``
        may be an :class:`Undecodable` (a copy of a file that was not text, kept aside):
        write its ``data`` when the sandbox can store bytes, else the text."""
        ...

    async def exists(self, path: str) -> bool:
        """Whether a file (not a directory) is at ``path``."""
        ...

    # ``builtins.list`` because the method named ``list`` shadows the builtin in the class body.
    async def list(self, prefix: str = "") -> builtins.list[str]:
        """Relative paths of every file whose path starts with ``prefix``, sorted."""
        ...

    async def delete(self, path: str) -> None:
        """Remove the file; a missing file is not an error."""
        ...


class Undecodable(str):
    """A file that is neither UTF-8 nor UTF-16 with a byte-order mark (GBK, Shift-JIS, a
    shell's binary output): as text, each byte that does not decode shown as U+FFFD;
    ``data``, its exact bytes.

    A ``str``, so that it passes unchanged through every sandbox and wrapper (the deadline's,
    a test's) to ``write_text``: a sandbox that can store bytes writes ``data``, and the copy
    sync keeps aside is the file itself, the agent's text recoverable in its own encoding;
    one that stores only text writes the U+FFFD text, as before.
    """

    data: bytes

    def __new__(cls, data: bytes) -> Undecodable:
        text = super().__new__(cls, data.decode("utf-8", errors="replace"))
        text.data = data
        return text


def decode_text(data: bytes) -> str:
    """A sandbox file's bytes as text: UTF-8, or UTF-16 when they start with a UTF-16
    byte-order mark; raises ``UnicodeDecodeError`` (the UTF-8 one) for anything else.

    Windows PowerShell 5 writes UTF-16 with a mark (``>``, ``Out-File``), and Notepad's
    "Unicode" does. The mark's bytes (FF FE, FE FF) never start UTF-8, so no UTF-8 file reads
    differently. Without a mark UTF-16 is a guess, and UTF-32 (FF FE 00 00) is refused.
    """
    if data.startswith(_UTF16_MARKS) and not data.startswith(codecs.BOM_UTF32_LE):
        with contextlib.suppress(UnicodeDecodeError):
            return data.decode("utf-16")  # the mark picks the byte order and is dropped
    return data.decode("utf-8")


class SandboxProvider(Protocol):
    """Hands out the sandbox of one user, or of one session of that user."""

    def for_user(self, user_id: str, session_id: str | None = None) -> Sandbox:
        """A handle on the sandbox, called on the event loop for every sync step and tool
        call: return at once, without network I/O (connect on the handle's first call),
        since no deadline can stop a synchronous call. Sync steps report an exception raised
        here as ``sandbox_failed``."""
        ...


@runtime_checkable
class ErasableSandboxProvider(Protocol):
    """The optional hook of a :class:`SandboxProvider` for a user's erasure
    (``memory.erase``); a provider without it is skipped, and the erasure says so."""

    def erase_user(self, user_id: str) -> bool:
        """Remove every sandbox of ``user_id`` — the user's and each session's — with all
        their files, so that nothing of them is read back into memory later; True when
        something was removed, False when there was nothing. Called once before and once
        after the user's rows are deleted, from a command or a worker thread, never on the
        event loop (it may block). Raise ``SandboxError`` when it cannot; it is called
        again when the erasure is run again."""
        ...


@runtime_checkable
class IdentifiedSandboxProvider(Protocol):
    """The optional hook of a :class:`SandboxProvider` that names the sandboxes it hands
    out, so that processes naming the same ones share what memstrata knows of them: the
    version each file was last synced at (``memstrata.sandbox.synced``), kept in the
    database under this identity. A provider without it (or returning ``None``) keeps that
    in the process alone."""

    def identity(self) -> str | None:
        """The same string in every process whose ``for_user(u, s)`` is the same sandbox
        (the same directory, bucket or container volume), a different one wherever it is
        another sandbox — replicas with sandbox roots of their own must not share it, or
        one's note would make another distrust its valid base records. Called once, when a
        sync service is built; may block briefly (no network)."""
        ...


@runtime_checkable
class SessionHoldingProvider(Protocol):
    """The optional hook of a :class:`SandboxProvider` that tells, across processes,
    whether a session is open: a session closed in one process is then read back at the
    user's next session start in any process (``memstrata.sandbox.sessions``). Without
    it, only a start in the process that closed the session reads it back."""

    async def hold_session(self, user_id: str, session_id: str | None) -> Callable[[], None] | None:
        """Count the session as open until the returned callable is called (at most once
        has effect; synchronous, from any thread) or this process ends, however it ends;
        ``None`` when a claim (below) keeps it from being held within a short wait.
        ``session_id`` ``None``: a session on the user's own sandbox, which sessions
        without an id share (a start there asks whether another holds it)."""
        ...

    async def claim_session(
        self, user_id: str, session_id: str | None
    ) -> Callable[[], None] | None:
        """Hold the session against every ``hold_session``, without waiting, until the
        returned callable is called; ``None`` while some process holds it open. Raise
        ``FileNotFoundError`` when the session has no sandbox (nothing to read back), or
        was never held."""
        ...


def lexical_parts(path: str) -> list[str] | None:
    """The components of a relative path after removing ``.``, empty parts and ``x/..``.

    ``None`` when a ``..`` climbs above the start. Purely textual: symlinks are the
    concrete sandbox's business.
    """
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return None
            parts.pop()
        else:
            parts.append(part)
    return parts


def normalise_sandbox_path(
    path: str, workspace_prefixes: Sequence[str] = DEFAULT_WORKSPACE_PREFIXES
) -> str | None:
    """The sandbox-relative form of a path an agent tool was called with, or ``None``.

    Agents address the same file as ``USER.md``, ``./USER.md`` or ``/workspace/USER.md``
    (the sandbox root as mounted in the agent's container); all three map to ``USER.md``.
    ``None`` means the path does not name a file inside the sandbox: it escapes with
    ``..``, is absolute outside every workspace prefix, contains NUL, or is the root itself.
    """
    if "\x00" in path:
        return None
    if path.startswith("/"):
        absolute = lexical_parts(path)
        if absolute is None:  # "/.." is "/" to the kernel, but nothing legitimate says it
            return None
        for prefix in workspace_prefixes:
            prefix_parts = lexical_parts(prefix)
            if prefix_parts is None or not prefix.startswith("/"):
                continue
            if absolute[: len(prefix_parts)] == prefix_parts:
                rest = absolute[len(prefix_parts) :]
                return "/".join(rest) if rest else None
        return None
    parts = lexical_parts(path)
    if not parts:
        return None
    return "/".join(parts)


def root_memory_file(
    path: str,
    *,
    case_sensitive: bool,
    workspace_prefixes: Sequence[str] = DEFAULT_WORKSPACE_PREFIXES,
) -> str | None:
    """The canonical memory-file name (``"USER.md"`` …) if ``path`` targets one at the root.

    ``case_sensitive`` must describe the sandbox's filesystem: on a case-insensitive one
    (macOS and Windows defaults) ``agents.md`` *is* AGENTS.md, so missing it would let an
    agent write the protected file or edit memory unnoticed. It has no default on purpose.
    Linux directories (:class:`~memstrata.sandbox.local.LocalDirectorySandbox` on Linux)
    are case-sensitive.
    """
    relative = normalise_sandbox_path(path, workspace_prefixes)
    if relative is None or "/" in relative:
        return None
    for kind in FileKind:
        name = kind.filename
        if relative == name or (not case_sensitive and relative.casefold() == name.casefold()):
            return name
    return None


def check_agent_write(
    path: str,
    *,
    case_sensitive: bool,
    workspace_prefixes: Sequence[str] = DEFAULT_WORKSPACE_PREFIXES,
) -> str:
    """The sandbox-relative path a controlled file tool may write, or raise.

    Raises ``SandboxPathError`` for paths outside the sandbox and ``ProtectedFileError`` for
    the root AGENTS.md, which the platform template owns (spec 4: AGENTS protection).
    """
    relative = normalise_sandbox_path(path, workspace_prefixes)
    if relative is None:
        raise SandboxPathError(
            f"{path!r} is not a file inside the sandbox; use a path relative to the sandbox "
            "root, such as 'USER.md' or 'notes/today.md'"
        )
    name = root_memory_file(relative, case_sensitive=case_sensitive)
    if name == FileKind.AGENTS.filename:
        raise ProtectedFileError(
            "AGENTS.md is managed by the platform and restored every session; put what you "
            "want to keep in MEMORY.md (or USER.md for facts about the user)"
        )
    return relative
