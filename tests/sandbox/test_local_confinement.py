"""LocalDirectorySandbox confinement of its own root, and reads of files that are not
memory files: FIFOs, directories, oversized files. Real directories under ``tmp_path``."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from memstrata.agent.pool import AgentPool
from memstrata.db.database import Database
from memstrata.errors import SandboxError, SandboxPathError
from memstrata.memory.kinds import MAX_CONTENT_BYTES, FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.sandbox import local
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.results import Outcome
from memstrata.sandbox.sync import SyncService
from tests.sandbox.support import RecordingIndexer, indexed_store, sync_events

pytestmark = pytest.mark.anyio

CAROL_NOTE = "- carol's unsaved note\n"


@pytest.fixture
def carol(sandbox_root: Path) -> Path:
    """Carol's user sandbox, with a session of hers, holding files no one else may touch."""
    home = sandbox_root / "carol"
    (home / "sessions" / "s2").mkdir(parents=True)
    for directory in (home, home / "sessions" / "s2"):
        (directory / "USER.md").write_text(CAROL_NOTE)
    return home


def snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


async def assert_every_operation_refused(sandbox: LocalDirectorySandbox, link: str) -> None:
    operations: list[Callable[[], Awaitable[object]]] = [
        lambda: sandbox.read_text("USER.md"),
        lambda: sandbox.write_text("USER.md", "mallory was here"),
        lambda: sandbox.exists("USER.md"),
        lambda: sandbox.list(),
        lambda: sandbox.delete("USER.md"),
    ]
    for operation in operations:
        with pytest.raises(SandboxPathError, match="is a symlink") as caught:
            await operation()
        assert repr(link) in str(caught.value)


# Symlinks between the provider's root and a sandbox


@pytest.mark.parametrize("absolute", [False, True], ids=["relative", "absolute"])
async def test_symlinked_session_directory_is_refused(
    provider: LocalSandboxProvider, sandbox_root: Path, carol: Path, absolute: bool
) -> None:
    sessions = sandbox_root / "mallory" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "s2").symlink_to(carol if absolute else Path("../../carol"))
    before = snapshot(carol)

    await assert_every_operation_refused(provider.for_user("mallory", "s2"), "mallory/sessions/s2")
    assert snapshot(carol) == before


async def test_refusal_does_not_name_where_the_link_leads(
    provider: LocalSandboxProvider, sandbox_root: Path, carol: Path
) -> None:
    (sandbox_root / "mallory" / "sessions").mkdir(parents=True)
    (sandbox_root / "mallory" / "sessions" / "s2").symlink_to(carol)
    with pytest.raises(SandboxPathError) as caught:
        await provider.for_user("mallory", "s2").read_text("USER.md")
    assert "carol" not in str(caught.value)
    assert str(sandbox_root) not in str(caught.value)


async def test_symlinked_sessions_directory_is_refused(
    provider: LocalSandboxProvider, sandbox_root: Path, carol: Path
) -> None:
    (sandbox_root / "mallory").mkdir(parents=True)
    (sandbox_root / "mallory" / "sessions").symlink_to(carol / "sessions")
    before = snapshot(carol)

    await assert_every_operation_refused(provider.for_user("mallory", "s2"), "mallory/sessions")
    assert snapshot(carol) == before


async def test_session_link_that_stays_in_the_users_own_directory_is_refused_too(
    provider: LocalSandboxProvider, sandbox_root: Path
) -> None:
    # Harmless in itself, but a real directory is the simple rule that leaves no doubt.
    await provider.for_user("mallory").write_text("notes/a.md", "a")
    (sandbox_root / "mallory" / "sessions").mkdir()
    (sandbox_root / "mallory" / "sessions" / "s2").symlink_to(Path("../notes"))
    await assert_every_operation_refused(provider.for_user("mallory", "s2"), "mallory/sessions/s2")


@pytest.mark.parametrize("inside_root", [True, False], ids=["to-another-user", "outside-root"])
async def test_symlinked_user_directory_is_refused(
    provider: LocalSandboxProvider, sandbox_root: Path, carol: Path, inside_root: bool
) -> None:
    target = carol
    if not inside_root:
        target = sandbox_root.parent / "elsewhere"
        target.mkdir()
        (target / "USER.md").write_text(CAROL_NOTE)
    (sandbox_root / "mallory").symlink_to(target)
    before = snapshot(target)

    await assert_every_operation_refused(provider.for_user("mallory"), "mallory")
    await assert_every_operation_refused(provider.for_user("mallory", "s2"), "mallory")
    assert snapshot(target) == before


async def test_dangling_session_link_creates_nothing_where_it_points(
    provider: LocalSandboxProvider, sandbox_root: Path
) -> None:
    elsewhere = sandbox_root.parent / "not-yet"
    (sandbox_root / "mallory" / "sessions").mkdir(parents=True)
    (sandbox_root / "mallory" / "sessions" / "s2").symlink_to(elsewhere)
    with pytest.raises(SandboxPathError, match="is a symlink"):
        await provider.for_user("mallory", "s2").write_text("USER.md", "x")
    assert not elsewhere.exists()


async def test_link_planted_while_the_directories_are_created_is_caught(
    provider: LocalSandboxProvider,
    sandbox_root: Path,
    carol: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The first check finds no session directory; the link appears before mkdir, which
    # then leaves it in place (EEXIST). The check after creating must see it.
    make_directories = local.make_directories

    def plant_then_make(directory: str, mode: int) -> None:
        (sandbox_root / "mallory" / "sessions").mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            (sandbox_root / "mallory" / "sessions" / "s2").symlink_to(Path("../../carol"))
        make_directories(directory, mode)

    monkeypatch.setattr(local, "make_directories", plant_then_make)
    before = snapshot(carol)
    with pytest.raises(SandboxPathError, match="is a symlink"):
        await provider.for_user("mallory", "s2").write_text("USER.md", "mallory was here")
    assert snapshot(carol) == before


async def test_real_user_and_session_directories_still_work(tmp_path: Path) -> None:
    # The provider's own root may be a symlink: only what lies below it is checked.
    (tmp_path / "real-root").mkdir()
    (tmp_path / "root-link").symlink_to(tmp_path / "real-root", target_is_directory=True)
    provider = LocalSandboxProvider(tmp_path / "root-link")
    await provider.for_user("alice").write_text("USER.md", "user")
    await provider.for_user("alice", "s1").write_text("USER.md", "session")
    assert await provider.for_user("alice", "s1").read_text("USER.md") == "session"
    assert await provider.for_user("alice").list() == ["USER.md", "sessions/s1/USER.md"]
    assert (tmp_path / "real-root" / "alice" / "sessions" / "s1" / "USER.md").is_file()


async def test_session_start_and_frontend_edit_leave_the_linked_user_alone(
    sync: SyncService, store: MemoryStore, sandbox_root: Path, carol: Path
) -> None:
    # The reported escape, end to end: mallory's agent links a session of hers to carol's
    # sandbox; a session then starts there, and mallory's frontend edit mirrors to it.
    (sandbox_root / "mallory" / "sessions").mkdir(parents=True)
    (sandbox_root / "mallory" / "sessions" / "s2").symlink_to(Path("../../carol"))
    before = snapshot(carol)

    results = await sync.start_session("mallory", "s2")
    stored = store.get_memory_file("mallory", FileKind.USER)
    assert stored is not None and CAROL_NOTE not in stored.content
    await sync.frontend_edit("mallory", "user", "- mallory's own note\n")

    assert snapshot(carol) == before
    assert {r.outcome for r in results} == {Outcome.SANDBOX_FAILED}


# Reads of files that are not memory files


@contextlib.contextmanager
def fifo_unblocked_after(fifo: Path, seconds: float) -> Iterator[None]:
    """After ``seconds``, keeps opening both ends of ``fifo``: a read or write stuck in
    open() gets through (to EOF or a broken pipe), so a regression fails the test instead
    of hanging the suite on a thread that never ends."""
    stop = threading.Event()

    def unblock() -> None:
        if stop.wait(seconds):
            return
        while not stop.wait(0.05):
            for flags in (os.O_RDONLY, os.O_WRONLY):
                with contextlib.suppress(OSError):  # ENXIO: no reader to meet
                    os.close(os.open(fifo, flags | os.O_NONBLOCK))

    thread = threading.Thread(target=unblock, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@pytest.fixture
def box(tmp_path: Path) -> LocalDirectorySandbox:
    root = tmp_path / "box"
    root.mkdir()
    return LocalDirectorySandbox(root)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
async def test_fifo_is_refused_at_once(box: LocalDirectorySandbox) -> None:
    fifo = box.root / "SOUL.md"
    os.mkfifo(fifo)
    with fifo_unblocked_after(fifo, 3.0):
        started = time.monotonic()
        with pytest.raises(
            SandboxError, match=r"'SOUL\.md' is not a regular file \(it is a FIFO\)"
        ):
            await box.read_text("SOUL.md")
        assert time.monotonic() - started < 1.0
    assert await box.exists("SOUL.md") is False
    assert await box.list() == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
async def test_write_replaces_a_fifo_without_blocking(box: LocalDirectorySandbox) -> None:
    fifo = box.root / "SOUL.md"
    os.mkfifo(fifo)
    with fifo_unblocked_after(fifo, 3.0):
        started = time.monotonic()
        await box.write_text("SOUL.md", "Be kind.\n")
        assert time.monotonic() - started < 1.0
    assert fifo.is_file()
    assert await box.read_text("SOUL.md") == "Be kind.\n"


async def test_directory_is_refused_as_not_a_regular_file(box: LocalDirectorySandbox) -> None:
    (box.root / "USER.md").mkdir()
    with pytest.raises(
        SandboxError, match=r"'USER\.md' is not a regular file \(it is a directory\)"
    ) as caught:
        await box.read_text("USER.md")
    assert isinstance(caught.value.__cause__, IsADirectoryError)


async def test_oversized_file_is_refused_with_its_size_and_the_cap(tmp_path: Path) -> None:
    box = LocalSandboxProvider(tmp_path, max_read_bytes=1024).for_user("u1")
    await box.write_text("USER.md", "x" * 1025)
    with pytest.raises(SandboxError, match=r"'USER\.md' is 1025 bytes, over the 1024-byte limit"):
        await box.read_text("USER.md")


async def test_huge_file_is_refused_without_being_read(box: LocalDirectorySandbox) -> None:
    # The reported 110 MB USER.md (sparse here, so it costs no disk), at the default cap.
    with open(box.root / "USER.md", "wb") as handle:
        handle.truncate(110 * 1024 * 1024)
    tracemalloc.start()
    try:
        with pytest.raises(SandboxError, match=r"'USER\.md' is 115343360 bytes, over the"):
            await box.read_text("USER.md")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024


async def test_file_growing_past_the_cap_is_not_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = LocalDirectorySandbox(tmp_path, max_read_bytes=1024)
    await box.write_text("USER.md", "x" * 50_000)
    # A size taken before the file grew: only the reads themselves can tell.
    real_fstat, real_read = os.fstat, os.read
    read: list[int] = []

    def stale_fstat(fd: int) -> os.stat_result:
        info = list(real_fstat(fd))
        info[6] = 10  # st_size
        return os.stat_result(info)

    def counting_read(fd: int, size: int) -> bytes:
        data = real_read(fd, size)
        read.append(len(data))
        return data

    monkeypatch.setattr(os, "fstat", stale_fstat)
    monkeypatch.setattr(os, "read", counting_read)
    with pytest.raises(SandboxError, match="grew while being read past the 1024-byte limit"):
        await box.read_text("USER.md")
    monkeypatch.undo()
    assert sum(read) == 1025


@pytest.mark.parametrize("tail", ["x", "xy"], ids=["just-under", "exactly-at"])
async def test_file_up_to_the_cap_is_read(tmp_path: Path, tail: str) -> None:
    box = LocalDirectorySandbox(tmp_path, max_read_bytes=1024)
    text = "é" * 511 + tail  # 1023 or 1024 bytes
    await box.write_text("USER.md", text)
    assert await box.read_text("USER.md") == text


async def test_file_over_the_store_limit_is_still_read_by_default(
    box: LocalDirectorySandbox,
) -> None:
    # Sync keeps such a file aside as a rejected copy: it has to be read first.
    assert local.MAX_READ_BYTES > MAX_CONTENT_BYTES
    text = "m" * (MAX_CONTENT_BYTES + 1)
    await box.write_text("MEMORY.md", text)
    assert await box.read_text("MEMORY.md") == text


def test_cap_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_read_bytes must be at least 1"):
        LocalDirectorySandbox(tmp_path, max_read_bytes=0)


async def test_a_file_too_large_to_read_is_left_in_place_by_a_frontend_edit(
    db: Database,
    templates: TemplateSet,
    indexer: RecordingIndexer,
    pool: AgentPool[object],
    sandbox_root: Path,
    logs: pytest.LogCaptureFixture,
) -> None:
    """It cannot be read, so it cannot be kept aside: a frontend edit's push replaced it
    without a copy. Now the DB takes the edit and the file stays until it is shrunk."""
    provider = LocalSandboxProvider(sandbox_root, max_read_bytes=1024)
    sync = SyncService(indexed_store(db, templates, indexer), provider, pool=pool)
    await sync.start_session("olga")
    huge = provider.for_user("olga").root / "USER.md"
    huge.write_text("- the agent's long list\n" * 100)  # 2,400 bytes, over the 1,024 cap
    before = huge.read_bytes()

    stored = await sync.frontend_edit("olga", "user", "- edited on the page\n")

    assert stored.content == "- edited on the page\n"
    assert huge.read_bytes() == before
    (mirror,) = [
        e
        for e in sync_events(logs)
        if e.get("scenario") == "frontend" and e.get("direction") == "db->sandbox"
    ]
    assert mirror["result"] == "sandbox_failed" and "left in place" in mirror["detail"]
