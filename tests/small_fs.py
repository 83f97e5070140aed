"""A real small file system for full-disk tests: a ``tmpfs`` mounted with ``size=``.

Needs the right to mount (root, as in CI and the development container); elsewhere the
tests that use it are skipped, and the pure tests beside them cover the same rules with
an injected error. Filling it is real too: a ballast file written until the kernel says
ENOSPC.
"""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

SmallFs = Callable[[str], Path]
CHUNK = 1024 * 1024


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[SmallFs]:
    """``small_fs("32m")`` → a new empty tmpfs of that size, unmounted after the test."""
    mounted: list[Path] = []

    def mount(size: str) -> Path:
        point = tmp_path / f"fs{len(mounted)}"
        point.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in reversed(mounted):
        # Lazily: a process that still holds a file there must not fail the test run.
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def fill(directory: Path, leave: int = 0) -> Path:
    """Write a ballast file in ``directory`` until the file system refuses (ENOSPC), then
    give ``leave`` bytes back; returns the ballast (unlink it to free the space)."""
    ballast = directory / "ballast"
    with ballast.open("wb", buffering=0) as out:  # unbuffered: close() has nothing to write
        try:
            while True:
                out.write(b"\0" * CHUNK)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    size = ballast.stat().st_size
    with ballast.open("r+b") as out:
        out.truncate(max(0, size - leave))
    return ballast
