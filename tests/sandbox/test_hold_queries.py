"""A session hold's answer to "does another session hold this sandbox?" (``sandbox.holds``)
is about its own lock file, and errs on the safe side where it cannot tell.

Real lock files in a real directory; the fault injected is the timing of a release on
another thread (and, for macOS's lack of OFD locks, the constants a Linux host has).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
from pathlib import Path

import pytest

from memstrata.sandbox import holds
from memstrata.sandbox.local import LocalSandboxProvider

USER = "ada"


def test_a_release_waits_for_a_query_under_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release on another thread in the middle of a query used to close the descriptor
    under it: its number, reused by the next file opened, made the query ask about that
    file. The query now ends on its own lock file, then the release closes it."""
    provider = LocalSandboxProvider(tmp_path)
    first = asyncio.run(provider.hold_session(USER, None))
    assert first is not None
    fd = first._fd  # type: ignore[attr-defined]
    lock_file = os.fstat(fd).st_ino
    real = fcntl.fcntl
    seen: list[int | None] = []
    releaser = threading.Thread(target=first)

    def querying(target: int, cmd: int, arg: bytes | int = 0) -> bytes | int:
        if cmd == holds._OFD_GETLK and not releaser.is_alive() and not seen:
            releaser.start()  # the session ends on another thread meanwhile
            releaser.join(timeout=0.3)
            other = os.open(tmp_path / "another-file", os.O_RDWR | os.O_CREAT)
            try:
                seen.append(os.fstat(target).st_ino)
            except OSError:
                seen.append(None)  # closed under the query
            finally:
                os.close(other)
        return real(target, cmd, arg)

    monkeypatch.setattr(fcntl, "fcntl", querying)
    answer = holds.others_hold(first)
    releaser.join(timeout=5)

    assert (seen, answer, releaser.is_alive()) == ([lock_file], False, False)
    assert holds.others_hold(first) is False  # released


def test_without_ofd_locks_a_hold_says_another_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """macOS has no OFD locks: a hold cannot tell another process's lock from its own. It
    used to say no other held the sandbox, so a round end on a sandbox another process's
    session had open settled the copies that session's agent had read; it now says one
    does (the safe mistake)."""
    monkeypatch.setattr(holds, "_OFD_GETLK", None)
    monkeypatch.setattr(holds, "_OFD_SETLK", None)
    monkeypatch.setattr(holds, "TELLS", False, raising=False)
    provider = LocalSandboxProvider(tmp_path)

    async def run() -> tuple[bool | None, bool | None]:
        alone = await provider.hold_session(USER, None)
        assert alone is not None
        answer = holds.others_hold(alone)
        alone()
        return answer, holds.others_hold(alone)

    assert asyncio.run(run()) == (True, False)
