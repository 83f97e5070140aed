"""A sandbox backed by a local directory: one directory per user under a common root.

Layout::

    <root>/<user dir>/                           the user's sandbox (USER.md, MEMORY.md, ...)
    <root>/<user dir>/sessions/<session dir>/    a session's sandbox, when a session id is given

A session's folder lies inside its user's sandbox, so the user's ``list()`` shows the
session files too (under ``sessions/``). Directories are created on the first write. Ids
become directory names through :func:`~memstrata.sandbox.dir_names.safe_dir_name`, which is
injective, so two ids never share a directory (ids whose encoding is over 120 characters
are hashed: distinct unless 128 bits of SHA-256 collide).

Confinement is checked before every operation: the path is normalised lexically and then
resolved with ``realpath``; a symlink anywhere along it that points outside the sandbox
root is refused. Some links are never followed, even within the sandbox: a root memory
file that is a symlink or a hard link, and any link under ``.memstrata/``
(:mod:`memstrata.sandbox.links`). The sandbox root is itself confined: the directories
between the provider's root and a sandbox must not be links either (:func:`.links.confined_root`).

Reads open the file without blocking and refuse anything but a regular file (a FIFO would
hang the reading thread) and files over ``max_read_bytes``, without reading them whole
(:mod:`memstrata.sandbox.file_io` holds these file-system steps).
Text is read by :func:`~memstrata.sandbox.base.decode_text` (UTF-8, or UTF-16 after its
byte-order mark) and written as UTF-8; a file that is neither is refused with its bytes
(:class:`~memstrata.sandbox.base.Undecodable`), which ``write_text`` writes as they were.

The check and the open are two system calls, so a process that swaps a directory for a
symlink in between could still escape (not into a root memory file, opened from the
directories checked: :func:`.links.open_root`); this sandbox trusts the processes that
share its directory. Use a container sandbox for agents that run untrusted shell code.
"""

from __future__ import annotations

import builtins
import os
import socket
import sys
from contextlib import AbstractAsyncContextManager, nullcontext
from pathlib import Path

import anyio.to_thread

from memstrata.errors import SandboxEncodingError, SandboxError, SandboxPathError
from memstrata.memory.kinds import validate_user_id
from memstrata.sandbox import holds
from memstrata.sandbox.base import Undecodable, decode_text, lexical_parts, root_memory_file
from memstrata.sandbox.dir_names import safe_dir_name
from memstrata.sandbox.erasing import (
    UnfinishedErasure,
    erase_user_directory,
    unfinished_erasures,
)
from memstrata.sandbox.exclusive import LOCK_FILE, FileLocks
from memstrata.sandbox.file_io import (
    atomic_replace,
    directory_mode,
    list_files,
    make_directories,
    read_capped,
)
from memstrata.sandbox.links import (
    confined_root,
    is_record,
    listed,
    open_root,
    read_record,
    steps_between,
    write_record,
)

# New sandbox files are private to the service's account, like PostgreSQL's data
# directory: they hold the user's memory. A platform whose agents read them as another
# account sets MEMSTRATA_SANDBOX_FILE_MODE (e.g. 660 with a shared group).
PRIVATE_FILE_MODE = 0o600

# Bounds the memory a read can take (a 110 MB file planted as USER.md used to be read
# whole). Far above the store's default limit (MAX_CONTENT_BYTES, 256 KiB) on purpose: a
# file the store refuses must still be read, so that sync can keep it aside as a rejected
# copy before restoring the DB's.
MAX_READ_BYTES = 16 * 1024 * 1024


class LocalDirectorySandbox:
    """A :class:`~memstrata.sandbox.base.Sandbox` rooted at one local directory.

    ``case_sensitive`` reports the platform default (``False`` on macOS and Windows) for
    :func:`~memstrata.sandbox.base.root_memory_file`; a case-folding mount on Linux would
    need it overridden. ``within`` is the directory ``root`` lies in (the provider's root):
    the directories between the two must not be symlinks (module doc). Reads of files over
    ``max_read_bytes`` fail. ``exclusive()`` holds ``flock`` on ``.memstrata/lock``
    (:mod:`memstrata.sandbox.exclusive`); ``locks``: the holders shared with the other
    handles of the same provider.
    """

    def __init__(
        self,
        root: Path,
        *,
        case_sensitive: bool | None = None,
        file_mode: int = PRIVATE_FILE_MODE,
        max_read_bytes: int = MAX_READ_BYTES,
        within: Path | None = None,
        locks: FileLocks | None = None,
    ) -> None:
        if max_read_bytes < 1:
            raise ValueError(f"max_read_bytes must be at least 1, got {max_read_bytes!r}")
        self._root = Path(root)
        self.case_sensitive = (
            sys.platform not in ("darwin", "win32") if case_sensitive is None else case_sensitive
        )
        self._file_mode = file_mode
        self._max_read_bytes = max_read_bytes
        self._within = None if within is None else Path(within)
        self._steps = () if within is None else steps_between(Path(within), self._root)
        self._locks = FileLocks() if locks is None else locks

    @property
    def root(self) -> Path:
        return self._root

    def __repr__(self) -> str:
        return f"LocalDirectorySandbox({str(self._root)!r})"

    async def read_text(self, path: str) -> str | None:
        return await anyio.to_thread.run_sync(self._read_text, path)

    async def write_text(self, path: str, content: str) -> None:
        await anyio.to_thread.run_sync(self._write_text, path, content)

    async def exists(self, path: str) -> bool:
        return await anyio.to_thread.run_sync(self._exists, path)

    async def list(self, prefix: str = "") -> builtins.list[str]:
        return await anyio.to_thread.run_sync(self._list, prefix)

    async def delete(self, path: str) -> None:
        await anyio.to_thread.run_sync(self._delete, path)

    def exclusive(self) -> AbstractAsyncContextManager[None]:
        """Hold this sandbox against every other process and task (module doc of
        :mod:`memstrata.sandbox.exclusive`); re-entrant for the task holding it."""
        return self._locks.hold(str(self._root), self._open_lock)

    # Blocking implementations, run in a worker thread.

    def _real_root(self) -> str:
        """The root's real path; ``SandboxPathError`` if a step below ``within`` is a link."""
        return confined_root(self._root, self._within, self._steps)

    def _resolve(self, path: str) -> tuple[str, str]:
        """(real root, real target) for a file path, or raise ``SandboxPathError``."""
        if not isinstance(path, str):
            raise SandboxPathError(f"sandbox paths are strings, got {type(path).__name__}")
        if "\x00" in path:
            raise SandboxPathError(f"path {path!r} contains a NUL character")
        if path.startswith("/"):
            raise SandboxPathError(
                f"path {path!r} is absolute; use a path relative to the sandbox root, "
                "such as 'USER.md'"
            )
        parts = lexical_parts(path)
        if parts is None:
            raise SandboxPathError(f"path {path!r} climbs out of the sandbox with '..'")
        if not parts:
            raise SandboxPathError(f"path {path!r} names the sandbox root, not a file")
        real_root = self._real_root()
        target = os.path.realpath(os.path.join(real_root, *parts))
        if not target.startswith(real_root.rstrip(os.sep) + os.sep):
            raise SandboxPathError(
                f"path {path!r} leads outside the sandbox through a symlink; "
                "only links that stay inside the sandbox can be followed"
            )
        return real_root, target

    def _unfollowed(self, path: str) -> tuple[str, bool]:
        """The file to read or write for ``path``: its real path, but a memory file's own
        name in the root, and whether it is one: a link there is not followed, reads refuse
        it, writes rename over it (:mod:`.links`)."""
        real_root, target = self._resolve(path)
        parts = lexical_parts(path) or []
        if len(parts) == 1 and root_memory_file(
            parts[0], case_sensitive=self.case_sensitive, workspace_prefixes=()
        ):
            return os.path.join(real_root, parts[0]), True
        return target, False

    def _read_text(self, path: str) -> str | None:
        target, memory_file = self._unfollowed(path)
        parts = lexical_parts(path) or []
        try:
            if is_record(parts):
                data = read_record(self._real_root(), parts, path, self._max_read_bytes)
            elif memory_file:
                with open_root(self._root, self._within, self._steps) as fd:
                    data = read_capped(parts[0], path, self._max_read_bytes, dir_fd=fd, single=True)
            else:
                data = read_capped(target, path, self._max_read_bytes)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SandboxError(f"cannot read {path!r} in {self._root}: {exc.strerror}") from exc
        try:
            return decode_text(data)
        except UnicodeDecodeError as exc:
            raise SandboxEncodingError(
                f"{path!r} is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset "
                f"{exc.start}); memory files must be UTF-8 text — re-save it as UTF-8",
                Undecodable(data),
            ) from exc

    def _write_text(self, path: str, content: str) -> None:
        target, memory_file = self._unfollowed(path)
        try:
            # A copy of a file that was not text is written as the bytes it was made of.
            data = content.data if isinstance(content, Undecodable) else content.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise SandboxError(
                f"cannot write {path!r}: the text has a lone surrogate at position "
                f"{exc.start} and is not encodable as UTF-8"
            ) from exc
        directory, name = os.path.split(target)
        parts = lexical_parts(path) or []
        try:
            if is_record(parts):
                dir_mode = directory_mode(self._file_mode)
                write_record(self._real_root(), parts, path, data, self._file_mode, dir_mode)
                return
            make_directories(directory, directory_mode(self._file_mode))
            # mkdir leaves a link planted meanwhile in place (EEXIST) and the write would
            # follow it: the directories just made are checked again.
            self._real_root()
            root = open_root(self._root, self._within, self._steps) if memory_file else None
            with root or nullcontext(None) as fd:
                atomic_replace(directory, name, data, self._file_mode, dir_fd=fd)
        except OSError as exc:
            raise SandboxError(
                f"cannot write {path!r} in {self._root}: {exc.strerror or exc}"
            ) from exc

    def _open_lock(self, path: str = LOCK_FILE, *, create: bool = True) -> int:
        """A lock file's descriptor (this sandbox's lock, or a session's hold, :mod:`.holds`);
        without ``create`` a missing one raises ``FileNotFoundError``."""
        _, target = self._resolve(path)
        if not create:
            return os.open(target, os.O_RDWR | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
        try:
            make_directories(os.path.dirname(target), directory_mode(self._file_mode))
            self._real_root()
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
            return os.open(target, flags, self._file_mode)
        except OSError as exc:
            raise SandboxError(
                f"cannot open the sandbox lock {path!r} in {self._root}: {exc.strerror or exc}"
            ) from exc

    def _exists(self, path: str) -> bool:
        _, target = self._resolve(path)
        return os.path.isfile(target)

    def _list(self, prefix: str) -> builtins.list[str]:
        if "\x00" in prefix:
            raise SandboxPathError(f"prefix {prefix!r} contains a NUL character")
        while prefix.startswith("./"):
            prefix = prefix[2:]
        real_root = self._real_root()
        if not os.path.lexists(real_root):
            return []
        if not os.path.isdir(real_root):
            raise SandboxError(f"sandbox root {self._root} is not a directory")
        return listed(real_root, list_files(real_root, prefix, f"cannot list {self._root}"))

    def _delete(self, path: str) -> None:
        real_root, _ = self._resolve(path)
        # Unlink the name the caller used: deleting a symlink removes the link, not its
        # target. Its directory is checked too, since a link outside may point back in.
        parts = lexical_parts(path) or []
        parent = os.path.realpath(os.path.join(real_root, *parts[:-1]))
        if parent != real_root and not parent.startswith(real_root.rstrip(os.sep) + os.sep):
            raise SandboxPathError(f"path {path!r} leads outside the sandbox through a symlink")
        name = os.path.join(parent, parts[-1])
        if os.path.isdir(name) and not os.path.islink(name):
            raise SandboxError(f"cannot delete {path!r}: it is a directory, not a file")
        try:
            os.unlink(name)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise SandboxError(f"cannot delete {path!r} in {self._root}: {exc.strerror}") from exc


class LocalSandboxProvider:
    """:class:`~memstrata.sandbox.base.SandboxProvider` over one root directory."""

    def __init__(
        self,
        root: Path,
        *,
        file_mode: int = PRIVATE_FILE_MODE,
        max_read_bytes: int = MAX_READ_BYTES,
    ) -> None:
        self._root = Path(root)
        self.file_mode = file_mode
        self.max_read_bytes = max_read_bytes
        self._locks = FileLocks()

    @property
    def root(self) -> Path:
        return self._root

    def identity(self) -> str:
        """``IdentifiedSandboxProvider``: the host and the root's real path, the same in
        every process on this host that opens this directory by any path (a symlink, a
        relative one). The host too: replicas in containers all say ``/data`` for volumes
        of their own. Processes on two hosts sharing one volume get two identities, which
        errs the safe way (each keeps notes of its own)."""
        return f"{socket.gethostname()}:{os.path.realpath(self._root)}"

    def directory_for(self, user_id: str, session_id: str | None = None) -> Path:
        """Where the sandbox of ``user_id`` (and ``session_id``, if given) lives."""
        directory = self._root / safe_dir_name(validate_user_id(user_id))
        if session_id is None:
            return directory
        if not isinstance(session_id, str) or not session_id:
            raise SandboxPathError("session_id must be a non-empty string or None")
        return directory / "sessions" / safe_dir_name(session_id)

    def for_user(self, user_id: str, session_id: str | None = None) -> LocalDirectorySandbox:
        return LocalDirectorySandbox(
            self.directory_for(user_id, session_id),
            file_mode=self.file_mode,
            max_read_bytes=self.max_read_bytes,
            within=self._root,
            locks=self._locks,
        )

    async def hold_session(self, user_id: str, session_id: str | None) -> holds.Release | None:
        """``SessionHoldingProvider``: ``flock`` in the session's sandbox (:mod:`.holds`)."""
        box = self.for_user(user_id, session_id)
        return await holds.hold(lambda: box._open_lock(holds.HOLD_FILE))

    async def claim_session(self, user_id: str, session_id: str | None) -> holds.Release | None:
        box = self.for_user(user_id, session_id)
        return await holds.claim(lambda: box._open_lock(holds.HOLD_FILE, create=False))

    def erase_user(self, user_id: str) -> bool:
        """Remove the user's sandbox directory with every session sandbox in it (a user's
        erasure, ``memory.erase``); False when there was none. Blocking.

        The directory must be a real directory, as for every other operation: a symlink
        there is refused with ``SandboxPathError`` and left alone (removing through it
        would delete whatever it leads to, perhaps another user's files) — look where it
        leads and remove it by hand. Links inside the directory are removed, never
        followed (``shutil.rmtree``, which also refuses a directory swapped for a link
        while it runs). The directory is first renamed aside (``.<dir>.erasing`` in the
        root: no user directory starts with a dot), so a write that comes meanwhile starts
        a new, empty directory instead of landing in one being deleted; what an erase cut
        short left there is removed by the next (:meth:`unfinished_erasures` finds it).
        The steps are :func:`~memstrata.sandbox.erasing.erase_user_directory`.
        """
        return erase_user_directory(self._root, user_id)

    def unfinished_erasures(self) -> builtins.list[UnfinishedErasure]:
        """What erasures cut short left in the root (:mod:`memstrata.sandbox.erasing`):
        erasing each user again removes it. Blocking."""
        return unfinished_erasures(self._root)
