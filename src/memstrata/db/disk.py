"""Is a disk memstrata writes to full? What ``/readyz`` says about it (``"disk": "full"``).

A full disk did not show anywhere but in the answers to writes: a memory-file write or an
import answered 503 ``database_unavailable`` ("try again shortly") while ``/readyz`` said
ready and ``ok``. Two signs, both cheap enough for every probe:

- the file systems of the local directories memstrata writes — the data directory (the
  embedded PostgreSQL's files, the development secret) and the sandbox root — through
  ``os.statvfs`` (one system call each, no file touched): full below
  ``DISK_FULL_BELOW_BYTES`` free, or with no free inode;
- the database's own answer, for a server whose disk ``statvfs`` cannot see (an external
  one): a statement refused with SQLSTATE 53100 (``disk_full``: "could not extend file
  …: No space left on device"), noted by an engine event with its time. It counts for
  ``DISK_FULL_HOLD_S`` after the last refusal: refusals go on while the disk stays full
  and writes come, and the answer turns ``ok`` again by itself once they stop.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event

from memstrata.config import Settings

# Below one WAL segment (16 MiB) PostgreSQL cannot add a WAL file, and initdb fails; on a
# real disk this little room left is full for any practical purpose, while a memory file
# and its sandbox copy need a few hundred KiB at most, so nothing is called full early.
DISK_FULL_BELOW_BYTES = 16 * 1024 * 1024
# How long a database refusal for a full disk counts after the last one (see module doc):
# a readiness probe every few seconds sees it, and it ends by itself once writes succeed
# or stop.
DISK_FULL_HOLD_S = 30.0
# SQLSTATE disk_full: PostgreSQL could not extend a file or write a temporary one.
DISK_FULL_SQLSTATE = "53100"
# What the operating system says for ENOSPC, in PostgreSQL's output too.
NO_SPACE_WORDS = os.strerror(errno.ENOSPC)  # "No space left on device"


def local_paths(settings: Settings, pgdata: Path | None, *, local_sandboxes: bool) -> list[Path]:
    """The local directories a runtime writes: the data directory, the sandbox root when
    the local directory sandboxes run (a host's provider may write elsewhere) and the
    embedded server's files (``pgdata``, None for an external server)."""
    paths = [settings.data_dir]
    if local_sandboxes:
        paths.append(settings.resolved_sandbox_root)
    if pgdata is not None:
        paths.append(pgdata)
    return paths


def existing_ancestor(path: Path) -> Path:
    """``path``, or the nearest directory above it that exists: a directory not made yet
    (the sandbox root before the first write) will be made on that one's file system."""
    current = path.absolute()
    while not current.exists() and current.parent != current:
        current = current.parent
    return current


def is_full(free_bytes: int, free_inodes: int, total_inodes: int) -> bool:
    """A file system where no file or block can be added any more. ``total_inodes`` 0: a
    file system that does not count inodes (btrfs), which never runs out of them."""
    return free_bytes < DISK_FULL_BELOW_BYTES or (total_inodes > 0 and free_inodes == 0)


def full_path(paths: Iterable[Path]) -> Path | None:
    """The first of ``paths`` whose file system is full, or None. A path that cannot be
    looked at is skipped: the probe reports what it knows."""
    seen: set[int] = set()
    for path in paths:
        try:
            where = existing_ancestor(path)
            device = where.stat().st_dev
            if device in seen:
                continue
            seen.add(device)
            stats = os.statvfs(where)
        except OSError:
            continue
        if is_full(stats.f_bavail * stats.f_frsize, stats.f_favail, stats.f_files):
            return path
    return None


def disk_full_error(exc: BaseException | None) -> bool:
    """Is ``exc`` (a DB-API error, or SQLAlchemy's wrapper of one) the database refusing a
    statement because its disk is full?"""
    orig = getattr(exc, "orig", exc)
    return getattr(orig, "sqlstate", None) == DISK_FULL_SQLSTATE


class DiskWatch:
    """The two signs of the module doc for one runtime: ``paths`` to look at, and the
    database refusals seen on the engines it is attached to."""

    def __init__(
        self,
        paths: Iterable[Path],
        *,
        hold_s: float = DISK_FULL_HOLD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.paths = tuple(paths)
        self.hold_s = hold_s
        self._clock = clock
        self._refused_at: float | None = None
        self._engines: list[Engine] = []

    def full_path(self) -> Path | None:
        """The first local path whose file system is full, or None (``full_path``)."""
        return full_path(self.paths)

    def database_full(self) -> bool:
        """Did the database refuse a statement for a full disk in the last ``hold_s``?"""
        refused_at = self._refused_at
        return refused_at is not None and self._clock() - refused_at < self.hold_s

    def record(self, exc: BaseException | None) -> None:
        """Note ``exc`` when it is a refusal for a full disk (any other error is not)."""
        if disk_full_error(exc):
            self._refused_at = self._clock()

    def attach(self, engine: Engine) -> None:
        """Note the refusals of every statement run on ``engine`` (until ``detach``)."""
        event.listen(engine, "handle_error", self._on_error)
        self._engines.append(engine)

    def detach(self) -> None:
        """Stop listening: the engine may be the caller's and outlive this runtime."""
        for engine in self._engines:
            event.remove(engine, "handle_error", self._on_error)
        self._engines.clear()

    def _on_error(self, context: Any) -> None:
        self.record(context.original_exception)
