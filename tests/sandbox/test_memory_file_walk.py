"""A root memory file is read and written through descriptors of the directories above it.

The directories between the provider's root and a sandbox are checked for links before
each operation (``links.confined_root``); the memory file was then opened by its whole
path, so a session directory swapped for a link between that check and the open (by a
process sharing the directory) led the read, or the write, into another user's sandbox.
The sandbox root is now reached one ``openat`` at a time with ``O_NOFOLLOW`` and the file
opened from its descriptor: a swap after the check finds the directory already open.
The swap is injected at the file's own open (a wrapped ``os.open``); the directories are
real, as is everything else.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memstrata.sandbox.local import LocalSandboxProvider

pytestmark = pytest.mark.anyio

OWN = "- ada's own\n"
OTHER = "- bob's, never ada's\n"


def swapping_open(session_dir: Path, hit: Callable[[str], bool]) -> Callable[..., int]:
    """``os.open`` that, at the first open ``hit`` names, swaps ``session_dir`` for a link
    to the other user's sandbox (the original kept as ``<dir>.moved``)."""
    real_open = os.open
    swapped: list[bool] = []

    def open_(path: Any, *args: Any, **kwargs: Any) -> int:
        if not swapped and hit(os.fspath(path)):
            swapped.append(True)
            session_dir.rename(session_dir.with_name(session_dir.name + ".moved"))
            session_dir.symlink_to(session_dir.parent.parent.parent / "bob")
        return real_open(path, *args, **kwargs)

    return open_


@pytest.fixture
def boxes(tmp_path: Path) -> tuple[LocalSandboxProvider, Path, Path]:
    provider = LocalSandboxProvider(tmp_path / "root")
    ada = provider.for_user("ada", "s1")
    bob = provider.for_user("bob")
    (bob.root).mkdir(parents=True)
    (bob.root / "MEMORY.md").write_text(OTHER)
    ada.root.mkdir(parents=True)
    (ada.root / "MEMORY.md").write_text(OWN)
    assert ada.root.parent.parent.parent == bob.root.parent
    return provider, ada.root, bob.root


async def test_a_session_directory_swapped_after_the_check_is_not_read_through(
    boxes: tuple[LocalSandboxProvider, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, ada_root, _ = boxes
    hit = swapping_open(ada_root, lambda path: os.path.basename(path) == "MEMORY.md")
    monkeypatch.setattr(os, "open", hit)

    try:
        text = await provider.for_user("ada", "s1").read_text("MEMORY.md")
    except Exception as exc:  # refused is as good as reading its own copy
        text = repr(exc)

    assert OTHER not in text


async def test_a_session_directory_swapped_after_the_check_is_not_written_through(
    boxes: tuple[LocalSandboxProvider, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, ada_root, bob_root = boxes
    temp = lambda path: os.path.basename(path).startswith(".MEMORY.md.memstrata-")  # noqa: E731
    monkeypatch.setattr(os, "open", swapping_open(ada_root, temp))

    with contextlib.suppress(Exception):  # refused: nothing written anywhere
        await provider.for_user("ada", "s1").write_text("MEMORY.md", "- ada's new\n")

    assert (bob_root / "MEMORY.md").read_text() == OTHER
    assert sorted(p.name for p in bob_root.iterdir()) == ["MEMORY.md"]
