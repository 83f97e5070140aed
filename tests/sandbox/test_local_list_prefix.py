"""``LocalDirectorySandbox.list(prefix)`` walks only the directory the prefix names (a
user's ``.memstrata/read-back/`` at every session start, not every session sandbox in the
user's directory), and lists exactly what the whole walk filtered by the prefix lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "notes/",
        "notes",
        "./notes/b",
        "notes/b/",
        "notes/b/c",
        "alias/",  # a symlinked directory: never walked, as in the whole walk
        "alias/notes.md",
        "no/such/dir/",
        "notes//b/",  # not a plain path: matches nothing in either walk
        "notes/../notes/",
        ".memstrata/",
    ],
)
async def test_a_prefix_lists_what_the_whole_walk_lists_under_it(
    prefix: str, tmp_path: Path
) -> None:
    sandbox = LocalDirectorySandbox(tmp_path / "box")
    for path in ("USER.md", "notes/a.md", "notes/b/c.md", "notes/bb.md", ".memstrata/lock"):
        await sandbox.write_text(path, path)
    (sandbox.root / "alias").symlink_to(sandbox.root / "notes", target_is_directory=True)
    plain = prefix.removeprefix("./")

    assert await sandbox.list(prefix) == [p for p in await sandbox.list() if p.startswith(plain)]


async def test_a_users_state_listing_leaves_the_session_sandboxes_out(tmp_path: Path) -> None:
    provider = LocalSandboxProvider(tmp_path)
    await provider.for_user("u1").write_text(".memstrata/read-back/s1.json", "{}")
    await provider.for_user("u1", "s1").write_text(".memstrata/read-back/x.json", "{}")
    listed = await provider.for_user("u1").list(".memstrata/read-back/")
    assert listed == [".memstrata/read-back/s1.json"]
