"""Temp files a killed write left in a sandbox are removed by the next process's first write
there; a temp file a running write may still use is not.

``atomic_replace`` writes a temp file (``.<FILE>.memstrata-<hex>.tmp``, a full copy of the
memory text) and renames it over the file; a process killed in between leaves the copy in
the agent's workspace (or under ``.memstrata/base/``). Real directories; the crash is the
file it leaves, dated back with ``os.utime``.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

import pytest

from memstrata.memory.store import MemoryStore
from memstrata.sandbox.file_io import STALE_TEMP_S, TEMP_NAME, is_stale_temp, sweep_stale_temps
from memstrata.sandbox.local import LocalSandboxProvider
from memstrata.sandbox.sync import SyncService
from tests.sandbox.support import USER


def temp_file(directory: Path, name: str, *, age_s: float, text: str = "a copy\n") -> Path:
    """A temp file as ``atomic_replace`` names it, last written ``age_s`` ago."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f".{name}.memstrata-{secrets.token_hex(8)}.tmp"
    path.write_text(text)
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_only_old_temp_files_of_a_write_are_stale() -> None:
    now = 1_000_000.0
    name = ".MEMORY.md.memstrata-0123456789abcdef.tmp"
    assert TEMP_NAME.match(name)
    assert is_stale_temp(name, now - STALE_TEMP_S - 1, now)
    assert not is_stale_temp(name, now - 1, now)  # a write may be using it
    for other in ("MEMORY.md", ".MEMORY.md.tmp", ".notes.memstrata-xyz.tmp", "a.memstrata-0.tmp"):
        assert not is_stale_temp(other, 0.0, now), other


def test_a_sweep_of_a_missing_directory_is_nothing(tmp_path: Path) -> None:
    assert sweep_stale_temps(str(tmp_path / "gone")) == []


@pytest.mark.anyio
async def test_a_session_start_removes_the_copies_a_killed_write_left(
    store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    box = provider.directory_for(USER)
    left = [
        temp_file(box, "MEMORY.md", age_s=600, text="- Y: home address is 1 Secret Road\n"),
        temp_file(box / ".memstrata" / "base", "MEMORY.md.json", age_s=120),
    ]
    in_use = temp_file(box, "USER.md", age_s=1)  # another process writing right now
    not_ours = box / ".notes.tmp"
    not_ours.write_text("the agent's own\n")
    os.utime(not_ours, (0, 0))

    await SyncService(store, provider).start_session(USER)

    assert not any(path.exists() for path in left)
    assert in_use.exists() and not_ours.exists()
    assert "Secret Road" not in "".join(
        p.read_text() for p in box.rglob("*") if p.is_file() and p.name != "lock"
    )


@pytest.mark.anyio
async def test_each_directory_is_swept_once_per_process(provider: LocalSandboxProvider) -> None:
    # The cost of the sweep: one directory listing at the first write there, not per write.
    box = provider.for_user(USER)
    await box.write_text("notes.md", "first\n")
    later = temp_file(provider.directory_for(USER), "MEMORY.md", age_s=600)

    await box.write_text("notes.md", "second\n")

    assert later.exists()  # left for the next process (or a forgotten directory's sweep)
    assert sweep_stale_temps(str(provider.directory_for(USER))) == [later.name]
