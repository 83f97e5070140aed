"""Whether a session's sandbox is open in any process: ``flock`` on a file in it.

The local provider's side of the optional ``SessionHoldingProvider`` hook
(:mod:`memstrata.sandbox.base`). Each start of a session takes a *shared* lock on
``.memstrata/open`` in the session's sandbox and keeps its descriptor until that start's
session ends (:func:`hold`; the returned release closes it); the kernel releases it when
the process dies, however it dies. A process that wants to read a closed session back
first *claims* it: an exclusive lock taken without waiting (:func:`claim`), which fails
while any process — this one included, through another descriptor — holds the session
open, and which a start of the session waits for (briefly) before holding it.

A hold also takes an open-file-description read lock (``F_OFD_SETLK``, Linux) on the same
file. ``flock`` cannot tell a holder whether anyone *else* holds the file (its own lock
fails every claim), but an OFD lock never conflicts with its own descriptor's: a hold asks
``F_OFD_GETLK`` for a write lock, which reports a read lock of any other hold — another
process's, or another start's in this one (:meth:`_Held.others_hold`). Where OFD locks do
not exist (macOS; :data:`TELLS` is False), a hold cannot tell its own lock from another's,
and says another holds it: the safe mistake, which keeps the copies another session's
agent may have read — at the cost of never settling them while the session is open.

Locks are taken with ``LOCK_NB`` and polled, so the event loop never blocks; the
descriptor is opened in a worker thread and closed if the caller stops waiting. It is
opened with ``O_CLOEXEC``: a child process must not keep a session open after its parent
closed it.
"""

from __future__ import annotations

import asyncio
import os
import struct
import sys
import threading
import time
import weakref
from collections.abc import Callable

from memstrata.sandbox.exclusive import opened

if sys.platform != "win32":
    import fcntl

HOLD_FILE = ".memstrata/open"
# How long a session start waits for another process's claim of the session (a read-back
# of its three files) before going on without holding it.
HOLD_WAIT_S = 10.0
# Polling a lock that a claim holds: from 1 ms, doubling to 20 ms (a claim lasts one
# read-back of three files).
_FIRST_POLL_S = 0.001
_MAX_POLL_S = 0.02

Release = Callable[[], None]
# ``struct flock`` as Linux lays it out (l_type, l_whence, l_start, l_len, l_pid); the
# kernel reads padding the buffer lacks as zeros. The range 0, 0 is the whole file.
_FLOCK = "hhqqi"
_OFD_GETLK: int | None = getattr(fcntl, "F_OFD_GETLK", None) if sys.platform != "win32" else None
_OFD_SETLK: int | None = getattr(fcntl, "F_OFD_SETLK", None) if sys.platform != "win32" else None
# Whether a hold can tell another hold from its own (OFD locks: Linux). Without them every
# hold answers that another holds its sandbox (module doc).
TELLS = _OFD_GETLK is not None and _OFD_SETLK is not None


async def hold(open_file: Callable[[], int], wait_s: float = HOLD_WAIT_S) -> Release | None:
    """A shared lock on the file ``open_file`` opens (in a worker thread), waiting at most
    ``wait_s`` while a claim holds it; None if it is still claimed then."""
    return await _lock(open_file, shared=True, wait_s=wait_s)


async def claim(open_file: Callable[[], int]) -> Release | None:
    """An exclusive lock on the file ``open_file`` opens, without waiting; None while any
    descriptor holds it. ``open_file``'s errors propagate (a missing file: never held)."""
    return await _lock(open_file, shared=False, wait_s=0.0)


async def _lock(open_file: Callable[[], int], *, shared: bool, wait_s: float) -> Release | None:
    if sys.platform == "win32":
        raise OSError("sessions cannot be held without flock")
    fd = await opened(open_file)
    mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
    deadline = time.monotonic() + wait_s
    delay = _FIRST_POLL_S
    locked = False
    try:
        while True:
            try:
                fcntl.flock(fd, mode)
                locked = True
                return _Held(fd, told=shared and _take_ofd_read_lock(fd))
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return None
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_POLL_S)
    finally:
        if not locked:
            os.close(fd)


def _ofd_request(kind: int) -> bytes:
    return struct.pack(_FLOCK, kind, os.SEEK_SET, 0, 0, 0)


def _take_ofd_read_lock(fd: int) -> bool:
    """Whether the hold on ``fd`` took its OFD read lock (module doc): False without OFD
    locks, or on a file system that refuses them."""
    if not TELLS or _OFD_SETLK is None:
        return False
    try:
        fcntl.fcntl(fd, _OFD_SETLK, _ofd_request(fcntl.F_RDLCK))
    except OSError:
        return False
    return True


class _Held:
    """The release of a lock: closes ``fd`` (which drops the lock) the first time it is
    called, from any thread — a second close could close a descriptor reused meanwhile —
    or when it is collected uncalled (a service dropped with sessions still open).
    ``told``: the hold took its OFD read lock, so :meth:`others_hold` can be answered.

    A release waits for a query under way on another thread (``_using``): closed in the
    middle of it, the descriptor's number could be reused by a file another thread opens,
    and the query would answer about that file."""

    __slots__ = ("__weakref__", "_close", "_fd", "_told", "_using")

    def __init__(self, fd: int, *, told: bool = False) -> None:
        self._fd = fd
        self._told = told
        self._using = threading.Lock()
        self._close = weakref.finalize(self, os.close, fd)

    def __call__(self) -> None:
        with self._using:
            self._close()

    def others_hold(self) -> bool:
        """Whether a hold other than this one holds the file (module doc). False once
        released; True when the query fails, where OFD locks do not exist (:data:`TELLS`),
        or when this hold could not take its OFD lock (keeping the copies another
        session's agent may have read is the safe mistake)."""
        with self._using:
            if not self._close.alive:
                return False
            if not self._told or _OFD_GETLK is None:
                return True
            try:
                found = fcntl.fcntl(self._fd, _OFD_GETLK, _ofd_request(fcntl.F_WRLCK))
            except OSError:
                return True
        return bool(struct.unpack(_FLOCK, found)[0] != fcntl.F_UNLCK)


def others_hold(release: object) -> bool | None:
    """``release.others_hold()`` for a hold taken here; None for any other release (a
    provider's own hold, which cannot be asked)."""
    return release.others_hold() if isinstance(release, _Held) else None
