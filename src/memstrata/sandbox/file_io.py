"""The blocking file-system steps under :class:`~memstrata.sandbox.local.LocalDirectorySandbox`.

Reads that open a file without blocking and refuse anything but a regular file or one over
a cap, without reading it whole (:func:`read_capped`); writes that replace a file
atomically and durably (:func:`atomic_replace`, whose temp files :data:`TEMP_NAME` matches);
directories created with the mode their files need (:func:`make_directories`,
:func:`directory_mode`). Paths here are real paths already confined by the caller.

A process killed inside :func:`atomic_replace` (SIGKILL, the OOM killer, a power cut)
leaves its temp file behind: a full copy of the memory text it was writing, in the
agent's workspace or under ``.memstrata/base/``, never read back as memory but there for
an agent's ``ls -a`` or ``grep -r`` to find, perhaps after the user deleted what it says.
The first write to a directory in each process removes the temp files there older than
:data:`STALE_TEMP_S` (:func:`sweep_stale_temps`): a writer still using one is far younger.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import stat
import threading
import time
from collections import OrderedDict

from memstrata.errors import SandboxError, SandboxFileTooLargeError
from memstrata.logs import log_event
from memstrata.sandbox.base import lexical_parts

logger = logging.getLogger(__name__)

# The temp files of ``atomic_replace``, left behind only by a crash: never listed.
TEMP_NAME = re.compile(r"\A\..*\.memstrata-[0-9a-f]{16}\.tmp\Z")
# A temp file this old belongs to no running write (one takes milliseconds; a write slower
# than this loses its temp file and fails, it never loses text): a crash left it.
STALE_TEMP_S = 60.0
# Directories swept by this process, each once; past this many the least recently written
# is forgotten (and swept again at its next write), so a long-lived process does not grow.
MAX_SWEPT_DIRECTORIES = 4096

# O_NONBLOCK: opening a FIFO waits for a writer otherwise. O_NOFOLLOW: the target is a
# realpath already, so a link there now was swapped in after the check. The getattr
# defaults are for Windows, which lacks them (and needs O_BINARY).
_READ_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_READ_CHUNK = 1024 * 1024


def directory_mode(file_mode: int) -> int:
    """The mode of a directory holding files of ``file_mode``: whoever may read or write
    the files may enter it (0o600 -> 0o700, 0o660 -> 0o770, 0o644 -> 0o755)."""
    mode = file_mode
    for rw, x in ((0o600, 0o100), (0o060, 0o010), (0o006, 0o001)):
        if file_mode & rw:
            mode |= x
    return mode


def read_capped(
    target: str, path: str, cap: int, *, dir_fd: int | None = None, single: bool = False
) -> bytes:
    """The bytes of the regular file ``target`` (relative to ``dir_fd``, when given): a
    ``SandboxError`` for any other kind of file or one over ``cap`` bytes, found without
    reading more than ``cap + 1``. ``single``: a file with more than one name (a hard link)
    is refused too, checked on the descriptor read, so no swap between check and read."""
    try:
        fd = os.open(target, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP and is_link(target, dir_fd):
            raise _link_refused(path, target, dir_fd) from exc
        raise
    try:
        info = os.fstat(fd)
        _require_regular(path, info.st_mode)
        if single and info.st_nlink > 1:
            raise _hard_link_refused(path, info, target, dir_fd)
        if info.st_size > cap:
            raise _too_large(path, info.st_size, cap)
        # Sized by the file, not the cap: os.read allocates the whole size it is asked for.
        chunk = max(info.st_size + 1, _READ_CHUNK)
        chunks: list[bytes] = []
        remaining = cap + 1
        while remaining > 0:
            data = os.read(fd, min(chunk, remaining))
            if not data:
                break
            chunks.append(data)
            remaining -= len(data)
        if remaining <= 0:  # grew past the cap after the fstat
            raise _too_large(path, None, cap)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _require_regular(path: str, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    message = (
        f"{path!r} is not a regular file (it is {file_type(mode)}); memory files must be "
        "regular files — replace it with one"
    )
    if stat.S_ISDIR(mode):
        # The error reading a directory used to raise, kept as the cause for callers.
        raise SandboxError(message) from IsADirectoryError(
            errno.EISDIR, os.strerror(errno.EISDIR), path
        )
    raise SandboxError(message)


def is_link(name: str, dir_fd: int | None = None) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def _link_refused(path: str, target: str, dir_fd: int | None) -> SandboxError:
    try:
        leads_to = repr(os.readlink(target, dir_fd=dir_fd))
    except OSError:  # removed meanwhile
        leads_to = "another file"
    return SandboxError(
        f"{path!r} is a symlink to {leads_to}; it was not followed, since neither a memory "
        "file nor memstrata's record under .memstrata/ is read through a link (the file it "
        "leads to is read back as itself, if it is a memory file) and the database copy "
        "stays as it is — remove the link: the next sync writes a regular file there"
    )


def _hard_link_refused(
    path: str, info: os.stat_result, target: str, dir_fd: int | None
) -> SandboxError:
    # Only the names beside it are looked for: a memory file's are the sandbox root's.
    own = os.path.basename(target)
    try:
        with os.scandir(dir_fd if dir_fd is not None else os.path.dirname(target)) as entries:
            others = sorted(
                entry.name
                for entry in entries
                if entry.name != own
                and entry.inode() == info.st_ino
                and entry.stat(follow_symlinks=False).st_dev == info.st_dev
            )
    except OSError:
        others = []
    names = ", ".join(repr(name) for name in others) if others else "a file elsewhere"
    return SandboxError(
        f"{path!r} is hard-linked: it is the same file as {names} ({info.st_nlink} names in "
        "all); it was not read, since an edit under one name would be stored as the other "
        "file's too, and the database copy stays as it is — remove the name that does not "
        "belong (after `ln -f USER.md MEMORY.md`, remove MEMORY.md): the next sync writes "
        "the database copy there"
    )


def file_type(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((name for test, name in kinds if test(mode)), "of an unknown kind")


def _too_large(path: str, size: int | None, cap: int) -> SandboxFileTooLargeError:
    what = f"is {size} bytes, over" if size is not None else "grew while being read past"
    return SandboxFileTooLargeError(
        f"{path!r} {what} the {cap}-byte limit on sandbox reads, so it was not read; "
        "memory files are far smaller — shrink or remove it (or raise max_read_bytes)"
    )


def list_files(real_root: str, prefix: str, failed: str) -> list[str]:
    """The files below ``real_root`` (an existing directory) whose relative paths start
    with ``prefix``, sorted: links followed only to files inside ``real_root``, the temp
    files of :func:`atomic_replace` left out. An error walking is a ``SandboxError``
    starting with ``failed``."""
    inside = real_root.rstrip(os.sep) + os.sep
    found: list[str] = []

    def fail(exc: OSError) -> None:
        raise SandboxError(f"{failed}: {exc.strerror or exc}") from exc

    # From the directory the prefix names, the only one that can hold a match (the session
    # sandboxes are not walked for ".memstrata/read-back/"); os.walk follows no links.
    steps = prefix.split("/")[:-1]
    plain = lexical_parts("/".join(steps)) == steps
    top = os.path.join(real_root, *steps) if plain else real_root
    if os.path.realpath(top) != top or not os.path.isdir(top):
        return []
    for directory, _dirs, files in os.walk(top, onerror=fail):
        for name in files:
            if TEMP_NAME.match(name):
                continue
            full = os.path.join(directory, name)
            relative = os.path.relpath(full, real_root).replace(os.sep, "/")
            if not relative.startswith(prefix):
                continue
            real = os.path.realpath(full)
            if real.startswith(inside) and os.path.isfile(real):
                found.append(relative)
    return sorted(found)


def make_directories(directory: str, mode: int) -> None:
    """``os.makedirs`` with ``mode`` for every directory it creates (``makedirs`` gives it
    to the last one only); existing directories keep theirs."""
    missing: list[str] = []
    while directory and not os.path.isdir(directory):
        missing.append(directory)
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another writer made it meanwhile
            os.mkdir(path, mode)


def is_stale_temp(name: str, mtime: float, now: float) -> bool:
    """Whether a file is a temp file of :func:`atomic_replace` that a crash left behind."""
    return TEMP_NAME.match(name) is not None and now - mtime > STALE_TEMP_S


def sweep_stale_temps(directory: str, now: float | None = None) -> list[str]:
    """Remove the stale temp files (:func:`is_stale_temp`) in ``directory``, not below it;
    the names removed. Never raises: a file that cannot be removed stays for the next
    process, and the write that asked goes on."""
    moment = time.time() if now is None else now
    removed: list[str] = []
    try:
        entries = os.scandir(directory)
    except OSError:
        return removed
    with entries:
        for entry in entries:
            if not TEMP_NAME.match(entry.name):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) and is_stale_temp(entry.name, info.st_mtime, moment):
                    os.unlink(entry.path)
                    removed.append(entry.name)
            except OSError:
                continue
    return removed


class _Once:
    """Keys seen before, the ``limit`` most recent of them (thread-safe: writes run in
    worker threads)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def first(self, key: str) -> bool:
        with self._lock:
            if key in self._seen:
                self._seen.move_to_end(key)
                return False
            self._seen[key] = None
            if len(self._seen) > self._limit:
                self._seen.popitem(last=False)
            return True


_swept = _Once(MAX_SWEPT_DIRECTORIES)


def _sweep_once(directory: str) -> None:
    if not _swept.first(directory):
        return
    removed = sweep_stale_temps(directory)
    if removed:
        log_event(logger, "sandbox.stale_temp_removed", directory=directory, files=removed)


def atomic_replace(
    directory: str, name: str, data: bytes, file_mode: int, *, dir_fd: int | None = None
) -> None:
    """Write ``data`` to a temp file beside ``name``, fsync it, then rename it over ``name``.

    Readers see the old file or the new one, never a mix. A new file gets ``file_mode``
    (the umask applies as for any new file); an existing file keeps its mode. A link at
    ``name`` (a symlink, or another name of the file) is replaced by the file, never
    written through. ``dir_fd``: ``directory`` opened already, and used for every step, so
    a directory swapped for a link meanwhile is not followed. The first write to
    ``directory`` in this process removes the temp files a crash left there (module doc).
    """
    _sweep_once(directory)
    temp = f".{name}.memstrata-{secrets.token_hex(8)}.tmp"
    if dir_fd is None:
        temp, name = os.path.join(directory, temp), os.path.join(directory, name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    fd = os.open(temp, flags, file_mode, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            with contextlib.suppress(FileNotFoundError):
                # lstat: a link at ``name`` is replaced, not taken for the file it leads to.
                info = os.lstat(name, dir_fd=dir_fd)
                if stat.S_ISREG(info.st_mode):
                    os.fchmod(handle.fileno(), stat.S_IMODE(info.st_mode))
            os.fsync(handle.fileno())
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    if dir_fd is None:
        _fsync_directory(directory)
    else:
        _fsync_descriptor(dir_fd)


def _fsync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        _fsync_descriptor(fd)
    finally:
        os.close(fd)


def _fsync_descriptor(fd: int) -> None:
    # Makes the rename durable across a crash. Atomicity does not depend on it, and some
    # filesystems refuse to fsync a directory, so those refusals are ignored.
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
