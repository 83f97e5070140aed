"""Hard links at memory files, and links of either kind under ``.memstrata/``, are never
followed.

A memory file with another name (``ln -f USER.md MEMORY.md``) is refused on read like a
symlink (``sandbox_failed`` naming the other name), and a push replaces it instead of
writing into the other file: a read-back once stored USER's text as MEMORY. A base record
or a kept-aside copy that is a link (``ln -sf ../../notes.json .memstrata/base/MEMORY.md.json``)
reads as a missing base, and a write replaces it: an agent could make a base record say
anything, and the next write went into the file it pointed at. Real PostgreSQL, real
directories.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from memstrata.errors import SandboxError
from memstrata.memory.kinds import USER_FILE_KINDS, FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.state import base_path, read_base
from memstrata.sandbox.sync import Outcome, SyncService
from tests.sandbox.support import READ_BACKS, USER, by_file, read_back_via

pytestmark = pytest.mark.anyio

MEMORY_FILES = [kind.filename for kind in FileKind]
BASE = base_path("MEMORY.md")
COPY = ".memstrata/conflicts/MEMORY.md.20260101T000000.000000Z.md"


def hard_link(directory: Path, name: str, existing: str) -> None:
    """``ln -f existing name`` in ``directory``."""
    (directory / name).unlink(missing_ok=True)
    os.link(directory / existing, directory / name)


# -- hard links at memory files: the provider ----------------------------------------------


@pytest.mark.parametrize("name", MEMORY_FILES)
async def test_a_read_refuses_a_hard_linked_memory_file_and_names_its_other_name(
    tmp_path: Path, name: str
) -> None:
    box = LocalDirectorySandbox(tmp_path / "box")
    other = "SOUL.md" if name == "USER.md" else "USER.md"
    await box.write_text(other, "- Allergy: peanuts\n")
    hard_link(box.root, name, other)

    for path, also in ((name, other), (other, name)):  # neither name is the file's own
        with pytest.raises(SandboxError) as caught:
            await box.read_text(path)
        message = str(caught.value)
        assert f"{path!r} is hard-linked" in message
        assert f"same file as {also!r}" in message
        assert "not read" in message
        assert "remove the name that does not belong" in message
    assert os.stat(box.root / name).st_nlink == 2  # a read changes nothing


async def test_a_hard_link_to_a_file_elsewhere_is_refused_without_a_name(tmp_path: Path) -> None:
    box = LocalDirectorySandbox(tmp_path / "box")
    await box.write_text("notes/mine.md", "mine\n")
    os.link(box.root / "notes" / "mine.md", box.root / "MEMORY.md")
    elsewhere = r"'MEMORY\.md' is hard-linked: it is the same file as a file elsewhere"
    with pytest.raises(SandboxError, match=elsewhere):
        await box.read_text("MEMORY.md")
    assert await box.read_text("notes/mine.md") == "mine\n"  # other files: links are theirs


@pytest.mark.parametrize("name", MEMORY_FILES)
async def test_a_write_replaces_a_hard_linked_memory_file_and_leaves_the_other_alone(
    tmp_path: Path, name: str
) -> None:
    box = LocalDirectorySandbox(tmp_path / "box")
    other = "SOUL.md" if name == "USER.md" else "USER.md"
    await box.write_text(other, "- Allergy: peanuts\n")
    hard_link(box.root, name, other)

    await box.write_text(name, "pushed\n")

    assert (box.root / name).read_text() == "pushed\n"
    assert (box.root / other).read_text() == "- Allergy: peanuts\n"
    assert os.stat(box.root / name).st_nlink == os.stat(box.root / other).st_nlink == 1
    assert await box.read_text(name) == "pushed\n"


# -- ln -f USER.md MEMORY.md in a session's sandbox ---------------------------------------


@pytest.fixture
async def linked(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> LocalDirectorySandbox:
    """Session ``s1``'s sandbox, USER.md filled in, MEMORY.md a hard link to USER.md."""
    await sync.start_session(USER)
    user = store.get_memory_file(USER, FileKind.USER)
    assert user is not None
    content = user.content + "\n- Name: Alice\n- Allergy: peanuts\n"
    await sync.frontend_edit(USER, "user", content, expected_version=user.version)
    await sync.start_session(USER, "s1")
    box = provider.for_user(USER, "s1")
    hard_link(box.root, "MEMORY.md", "USER.md")
    return box


@pytest.mark.parametrize("via", READ_BACKS)
async def test_a_read_back_reports_the_hard_link_and_stores_nothing_through_it(
    sync: SyncService,
    store: MemoryStore,
    linked: LocalDirectorySandbox,
    via: str,
) -> None:
    before = {kind: store.get_memory_file(USER, kind) for kind in USER_FILE_KINDS}
    results = await read_back_via(sync, via)

    for name, other in (("MEMORY.md", "USER.md"), ("USER.md", "MEMORY.md")):
        result = results[name]
        assert result.outcome is Outcome.SANDBOX_FAILED, result
        assert result.detail is not None
        assert f"{name!r} is hard-linked: it is the same file as {other!r}" in result.detail
    assert {kind: store.get_memory_file(USER, kind) for kind in before} == before
    assert os.stat(linked.root / "MEMORY.md").st_nlink == 2  # the person's to undo
    assert "- Allergy: peanuts\n" in (linked.root / "USER.md").read_text()


async def test_a_memory_push_replaces_the_hard_link_and_leaves_user_md_alone(
    sync: SyncService, store: MemoryStore, linked: LocalDirectorySandbox
) -> None:
    user = store.get_memory_file(USER, FileKind.USER)
    memory = store.get_memory_file(USER, FileKind.MEMORY)
    assert user is not None and memory is not None

    edited = memory.content + "- 2026: moved to Lyon\n"
    await sync.frontend_edit(USER, "memory", edited, expected_version=memory.version)
    sync.end_session(USER, "s1")
    read_back = by_file(await sync.read_back_session(USER, "s1"))

    assert (linked.root / "MEMORY.md").read_text() == edited
    assert (linked.root / "USER.md").read_text() == user.content
    assert os.stat(linked.root / "USER.md").st_nlink == 1
    assert {r.outcome for r in read_back.values()} == {Outcome.UNCHANGED}
    assert store.get_memory_file(USER, FileKind.USER) == user


# -- links under .memstrata/: the provider -------------------------------------------------


@pytest.mark.parametrize("path", [BASE, COPY])
@pytest.mark.parametrize("kind", ["symlink", "hard link", "dangling symlink"])
async def test_a_bookkeeping_link_is_never_read_and_a_write_replaces_it(
    tmp_path: Path, path: str, kind: str
) -> None:
    box = LocalDirectorySandbox(tmp_path / "box")
    planted = '{"version": 1, "content": "whatever the agent says"}'
    await box.write_text("notes.json", planted)
    await box.write_text(path, "memstrata's own\n")
    (box.root / path).unlink()
    if kind == "hard link":
        os.link(box.root / "notes.json", box.root / path)
    else:
        (box.root / path).symlink_to("../../notes.json" if kind == "symlink" else "../../gone")

    refused = f"{path!r} is hard-linked" if kind == "hard link" else f"{path!r} is a symlink to"
    with pytest.raises(SandboxError) as caught:
        await box.read_text(path)
    assert refused in str(caught.value)
    await box.write_text(path, "memstrata's own again\n")

    assert (box.root / "notes.json").read_text() == planted
    assert not (box.root / path).is_symlink()
    assert not (box.root / "gone").exists()
    assert await box.read_text(path) == "memstrata's own again\n"


async def test_a_linked_bookkeeping_directory_is_never_read_or_written_through(
    tmp_path: Path,
) -> None:
    box = LocalDirectorySandbox(tmp_path / "box")
    await box.write_text("notes/MEMORY.md.json", '{"version": 1, "content": "planted"}')
    (box.root / ".memstrata").mkdir()
    (box.root / ".memstrata" / "base").symlink_to("../notes")

    with pytest.raises(SandboxError, match=r"'\.memstrata/base' is a symlink"):
        await box.read_text(BASE)
    with pytest.raises(SandboxError, match=r"'\.memstrata/base' is a symlink"):
        await box.write_text(BASE, '{"version": 2, "content": "x"}')

    assert sorted(p.name for p in (box.root / "notes").iterdir()) == ["MEMORY.md.json"]
    assert (box.root / "notes" / "MEMORY.md.json").read_text() == (
        '{"version": 1, "content": "planted"}'
    )


async def test_other_paths_still_follow_links_inside_the_sandbox(tmp_path: Path) -> None:
    box = LocalDirectorySandbox(tmp_path / "box")
    await box.write_text("notes/mine.md", "mine\n")
    (box.root / "docs").symlink_to("notes")
    assert await box.read_text("docs/mine.md") == "mine\n"
    await box.write_text("docs/mine.md", "changed\n")
    assert (box.root / "notes" / "mine.md").read_text() == "changed\n"


# -- a base record pointed at the agent's own file ----------------------------------------


async def test_a_linked_base_record_reads_as_missing_and_is_replaced(
    sync: SyncService, store: MemoryStore, provider: LocalSandboxProvider
) -> None:
    await sync.start_session(USER, "s1")
    box = provider.for_user(USER, "s1")
    memory = store.get_memory_file(USER, FileKind.MEMORY)
    assert memory is not None
    edited = memory.content + "- 2026-01-02: prefers the window seat\n"
    (box.root / "MEMORY.md").write_text(edited)
    # A record that claims the agent's copy is what memstrata last wrote: followed, the
    # read-back took the sandbox for merely behind and the edit was never stored.
    planted = json.dumps({"version": memory.version, "content": edited})
    (box.root / "claim.json").write_text(planted)
    (box.root / BASE).unlink()
    (box.root / BASE).symlink_to("../../claim.json")

    sync.end_session(USER, "s1")
    result = by_file(await sync.read_back_session(USER, "s1"))["MEMORY.md"]

    assert result.outcome is Outcome.WRITTEN, result
    stored = store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and stored.content == edited
    assert (box.root / "claim.json").read_text() == planted
    assert not (box.root / BASE).is_symlink()
    record = await read_base(box, "MEMORY.md")
    assert record is not None and (record.version, record.content) == (stored.version, edited)


@pytest.mark.parametrize("kind", ["symlink", "hard link"])
async def test_a_listing_of_bookkeeping_leaves_linked_files_out(tmp_path: Path, kind: str) -> None:
    """A linked kept-aside copy is never read (above): listed, every reader of the listing
    (the conflicts page, ``list_copies``) got a name whose read failed with a warning."""
    box = LocalDirectorySandbox(tmp_path / "box")
    await box.write_text(COPY, "kept aside\n")
    await box.write_text("notes.md", "the agent's\n")
    linked = COPY.replace("000000Z", "000001Z")
    if kind == "hard link":
        os.link(box.root / "notes.md", box.root / linked)
    else:
        (box.root / linked).symlink_to("../../notes.md")

    assert await box.list(".memstrata/conflicts/") == [COPY]
    assert await box.list("") == [COPY, "notes.md"]
    assert await box.read_text(COPY) == "kept aside\n"


async def test_the_lock_follows_a_linked_bookkeeping_directory_inside_the_sandbox(
    tmp_path: Path,
) -> None:
    """The lock file is only locked, never read or written: it follows a ``.memstrata``
    linked inside the sandbox (refusing would fail every sync), while the records there
    stay refused."""
    box = LocalDirectorySandbox(tmp_path / "box")
    await box.write_text("state/keep.md", "x\n")
    (box.root / ".memstrata").symlink_to("state")

    async with box.exclusive():
        assert (box.root / "state" / "lock").is_file()
    with pytest.raises(SandboxError, match=r"'\.memstrata' is a symlink"):
        await box.read_text(BASE)
