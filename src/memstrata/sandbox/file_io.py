"""The blocking file-system steps under :class:`~memstrata.sandbox.local.LocalDirectorySandbox`.

Reads that open a file without blocking and refuse anything but a regular file or one over
a cap, without reading it whole (:func:`read_capped`); writes that replace a file
atomically and durably (:func:`atomic_replace`, whose temp files :data:`TEMP_NAME` matches);
directories created with the mode their files need (:func:`make_directories`,
:func:`directory_mode`). Paths here are real paths already confined by the caller.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat

from memstrata.errors import SandboxError, SandboxFileTooLargeError

# The temp files of ``atomic_replace``, left behind only by a crash: never listed.
TEMP_NAME = re.compile(r"\A\..*\.memstrata-[0-9a-f]{16}\.tmp\Z")

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


def read_capped(target: str, path: str, cap: int) -> bytes:
    """The bytes of the regular file ``target``: a ``SandboxError`` for any other kind of
    file or one over ``cap`` bytes, found without reading more than ``cap + 1``."""
    fd = os.open(target, _READ_FLAGS)
    try:
        info = os.fstat(fd)
        _require_regular(path, info.st_mode)
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


def atomic_replace(directory: str, name: str, data: bytes, file_mode: int) -> None:
    """Write ``data`` to a temp file beside ``name``, fsync it, then rename it over ``name``.

    Readers see the old file or the new one, never a mix. A new file gets ``file_mode``
    (the umask applies as for any new file); an existing file keeps its mode.
    """
    final = os.path.join(directory, name)
    temp = os.path.join(directory, f".{name}.memstrata-{secrets.token_hex(8)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, file_mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            with contextlib.suppress(FileNotFoundError):
                os.fchmod(handle.fileno(), stat.S_IMODE(os.stat(final).st_mode))
            os.fsync(handle.fileno())
        os.replace(temp, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    _fsync_directory(directory)


def _fsync_directory(directory: str) -> None:
    # Makes the rename durable across a crash. Atomicity does not depend on it, and some
    # filesystems refuse to fsync a directory, so those refusals are ignored.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)
