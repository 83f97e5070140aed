"""The links :class:`~memstrata.sandbox.local.LocalDirectorySandbox` never follows, even
within the sandbox, and how its reads and writes avoid them.

* A root memory file (``USER.md`` …, ``AGENTS.md``) that is a symlink: a read refuses it
  (``SandboxError`` naming where it leads) and a write replaces the link with a regular
  file — an agent's ``ln -sf MEMORY.md AGENTS.md`` had the AGENTS.md template written into
  MEMORY.md.
* A root memory file with more than one name, a hard link (``ln -f USER.md MEMORY.md``):
  a read refuses it, naming the other names beside it, and a write replaces it, so the
  other name keeps its text — read as an edit, USER's text was stored as MEMORY.
* Anything below a ``.memstrata`` directory (base records, kept-aside copies, read-back
  marks: :mod:`memstrata.sandbox.state`): a symlink anywhere from the sandbox root down,
  or a hard link at the file itself, is refused by a read; a write replaces a link at the
  file and refuses a link at a directory. An agent could otherwise point a base record
  at a file of its own and have it say anything, and the next write went into that file.
  A refused base record reads as a missing one (``sandbox.push.read_base``), and a
  listing leaves such a file out (:func:`listed`): the conflicts page offered a linked
  copy whose read then failed. Not the lock and hold files (``.memstrata/lock``,
  ``.memstrata/open``): never read or written, only locked, they follow a linked
  ``.memstrata`` that stays inside the sandbox — at worst two sandboxes share a lock or a
  hold (the safe mistake), where refusing would fail every sync of the sandbox.

The checks are made on the descriptors read and written: a record is reached from the
sandbox root one ``openat`` at a time with ``O_NOFOLLOW``, and a memory file's link count
is taken by ``fstat`` on the descriptor it is read from, so no link swapped in between a
check and the open is followed. A root memory file is opened from a descriptor of the
sandbox root, reached the same way from the provider's root (:func:`open_root`): from the
very directories :func:`confined_root` checked, whatever is swapped in after the check.
(A record's walk starts at the root's checked real path.) POSIX only: it needs ``dir_fd``
support, which Windows lacks.

The sandbox root is itself confined (:func:`confined_root`): every directory the provider
puts between its root and a sandbox (``<user dir>``, ``sessions``, ``<session dir>``) must
be a real directory, not a symlink, or every operation fails with ``SandboxPathError`` —
an agent may write its user sandbox, and a link planted there as a session directory would
otherwise make that session's sandbox another user's. A write re-checks them after
creating the missing ones.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from memstrata.errors import SandboxError, SandboxPathError
from memstrata.sandbox.file_io import atomic_replace, is_link, make_directories, read_capped
from memstrata.sandbox.state import STATE_DIR

_DIRECTORY_FLAGS = (
    os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC
)


def is_record(parts: Sequence[str]) -> bool:
    """Whether the path of ``parts`` lies below a ``.memstrata`` directory (module doc)."""
    return STATE_DIR in parts[:-1]


def listed(real_root: str, paths: Sequence[str]) -> list[str]:
    """``paths`` (relative to ``real_root``, as a listing found them) without the records
    that are links: a read refuses them, so a listing of ``.memstrata/conflicts/`` must not
    offer them. Taken by ``lstat``, which follows no link."""
    kept: list[str] = []
    for path in paths:
        parts = path.split("/")
        if is_record(parts):
            try:
                found = os.lstat(os.path.join(real_root, *parts))
            except OSError:
                continue  # gone meanwhile
            if stat.S_ISLNK(found.st_mode) or found.st_nlink > 1:
                continue
        kept.append(path)
    return kept


def read_record(real_root: str, parts: Sequence[str], path: str, cap: int) -> bytes:
    """The bytes of the record at ``parts`` below ``real_root``, reached without following
    a link; ``FileNotFoundError`` when it, or a directory above it, is missing."""
    fd = _open_directory(real_root, parts[:-1], path)
    try:
        return read_capped(parts[-1], path, cap, dir_fd=fd, single=True)
    finally:
        os.close(fd)


def write_record(
    real_root: str, parts: Sequence[str], path: str, data: bytes, file_mode: int, dir_mode: int
) -> None:
    """Write the record at ``parts`` below ``real_root``: a link at it is replaced, a link
    at a directory above it refused (``SandboxError``), never written through."""
    directory = os.path.join(real_root, *parts[:-1])
    for depth in range(1, len(parts)):
        # Before the mkdir, which would create the missing directories through a link.
        if is_link(os.path.join(real_root, *parts[:depth])):
            raise _directory_link(path, parts[:depth])
    make_directories(directory, dir_mode)
    fd = _open_directory(real_root, parts[:-1], path)
    try:
        atomic_replace(directory, parts[-1], data, file_mode, dir_fd=fd)
    finally:
        os.close(fd)


@contextmanager
def open_root(root: Path, within: Path | None, steps: Sequence[str]) -> Iterator[int]:
    """A descriptor of the sandbox ``root``, reached from ``within`` (the provider's root)
    down ``steps`` one ``openat`` at a time with ``O_NOFOLLOW``: a directory swapped for a
    link after :func:`confined_root` checked it is refused (``SandboxPathError``), never
    followed. ``FileNotFoundError`` when a directory is missing."""
    if within is None:
        fd = os.open(os.path.realpath(root), _DIRECTORY_FLAGS)
    else:
        fd = _walk(os.open(os.path.realpath(within), _DIRECTORY_FLAGS), steps, _sandbox_link)
    try:
        yield fd
    finally:
        os.close(fd)


def _open_directory(real_root: str, steps: Sequence[str], path: str) -> int:
    """A descriptor of ``real_root``/``steps``, each step opened with ``O_NOFOLLOW`` from
    the one before: a ``SandboxError`` names the first that is a link."""
    return _walk(os.open(real_root, _DIRECTORY_FLAGS), steps, partial(_directory_link, path))


def _walk(fd: int, steps: Sequence[str], refused: Callable[[Sequence[str]], Exception]) -> int:
    """The descriptor of ``steps`` below the directory ``fd`` (closed), each opened with
    ``O_NOFOLLOW`` from the one before; ``refused(steps so far)`` raised at a link."""
    try:
        for depth, step in enumerate(steps, 1):
            try:
                inner = os.open(step, _DIRECTORY_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and is_link(step, fd):
                    raise refused(steps[:depth]) from exc
                raise
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _directory_link(path: str, steps: Sequence[str]) -> SandboxError:
    return SandboxError(
        f"cannot use {path!r}: {'/'.join(steps)!r} is a symlink, and memstrata's records "
        "under .memstrata/ are never read or written through a link (one could make a base "
        "record say anything) — remove the link: the next sync makes a real directory there"
    )


def steps_between(within: Path, root: Path) -> tuple[str, ...]:
    """The names leading from ``within`` down to ``root``, both taken lexically."""
    try:
        steps = root.relative_to(within).parts
    except ValueError:
        raise SandboxPathError(f"sandbox root {root} does not lie in {within}") from None
    if any(step in (os.curdir, os.pardir) for step in steps):
        raise SandboxPathError(f"sandbox root {root} must lie in {within} without '.' or '..'")
    return steps


def confined_root(root: Path, within: Path | None, steps: Sequence[str]) -> str:
    """The real path of the sandbox ``root``, which lies ``steps`` below ``within``;
    ``SandboxPathError`` if a step is a link (module doc)."""
    if within is None:
        return os.path.realpath(root)
    real = os.path.realpath(within)
    for depth, step in enumerate(steps, 1):
        real = os.path.join(real, step)
        try:
            mode = os.lstat(real).st_mode
        except OSError:
            # Missing (created by the first write) or unusable: the rest is not there
            # either, and the operation itself reports what is wrong.
            return os.path.join(real, *steps[depth:])
        if stat.S_ISLNK(mode):
            raise _sandbox_link(steps[:depth])
    return real


def _sandbox_link(steps: Sequence[str]) -> SandboxPathError:
    return SandboxPathError(
        f"sandbox directory {'/'.join(steps)!r} is a symlink; user and session directories "
        "must be real directories, since a link could lead into another user's files — "
        "remove the link (a real directory is created on the next write)"
    )
