"""LocalDirectorySandbox against real directories: round trips, atomicity, encodings,
confinement."""

from __future__ import annotations

import codecs
import os
from pathlib import Path

import anyio
import pytest

from memstrata.errors import SandboxEncodingError, SandboxError, SandboxPathError
from memstrata.sandbox import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.base import Undecodable, decode_text

pytestmark = pytest.mark.anyio


@pytest.fixture
def sandbox(tmp_path: Path) -> LocalDirectorySandbox:
    return LocalDirectorySandbox(tmp_path / "box")


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.rglob("*") if ".memstrata-" in p.name)


# Round trips


async def test_round_trip_is_byte_exact(sandbox: LocalDirectorySandbox) -> None:
    content = "# 用户\n名字：小明 👋🏽\r\nline without newline at end \u200b"
    await sandbox.write_text("USER.md", content)
    assert await sandbox.read_text("USER.md") == content
    assert (sandbox.root / "USER.md").read_bytes() == content.encode("utf-8")


async def test_missing_file_reads_none_and_root_is_created_lazily(
    sandbox: LocalDirectorySandbox,
) -> None:
    assert await sandbox.read_text("MEMORY.md") is None
    assert await sandbox.exists("MEMORY.md") is False
    assert await sandbox.list() == []
    assert not sandbox.root.exists()
    await sandbox.write_text("notes/deep/x.md", "x")
    assert (sandbox.root / "notes" / "deep" / "x.md").read_text() == "x"


async def test_paths_are_normalised(sandbox: LocalDirectorySandbox) -> None:
    await sandbox.write_text("./USER.md", "a")
    assert await sandbox.read_text("USER.md") == "a"
    assert await sandbox.read_text("notes/../USER.md") == "a"
    assert await sandbox.read_text(".//USER.md") == "a"
    assert await sandbox.exists("./USER.md") is True


async def test_overwrite_replaces_and_keeps_mode(sandbox: LocalDirectorySandbox) -> None:
    await sandbox.write_text("SOUL.md", "first version, longer than the second")
    os.chmod(sandbox.root / "SOUL.md", 0o640)
    await sandbox.write_text("SOUL.md", "second")
    assert await sandbox.read_text("SOUL.md") == "second"
    assert (sandbox.root / "SOUL.md").stat().st_mode & 0o777 == 0o640


async def test_list_and_delete(sandbox: LocalDirectorySandbox) -> None:
    for path in ("USER.md", "MEMORY.md", "notes/a.md", "notes/b/c.md", "other.txt"):
        await sandbox.write_text(path, path)
    assert await sandbox.list() == [
        "MEMORY.md",
        "USER.md",
        "notes/a.md",
        "notes/b/c.md",
        "other.txt",
    ]
    assert await sandbox.list("notes/") == ["notes/a.md", "notes/b/c.md"]
    assert await sandbox.list("./notes/b") == ["notes/b/c.md"]
    await sandbox.delete("notes/a.md")
    await sandbox.delete("notes/a.md")  # deleting a missing file is not an error
    assert await sandbox.list("notes") == ["notes/b/c.md"]
    with pytest.raises(SandboxError, match="is a directory"):
        await sandbox.delete("notes/b")


async def test_exists_is_false_for_a_directory(sandbox: LocalDirectorySandbox) -> None:
    await sandbox.write_text("notes/a.md", "a")
    assert await sandbox.exists("notes") is False
    assert await sandbox.exists("notes/a.md") is True


# Atomicity


async def test_no_temp_files_left_after_writes(sandbox: LocalDirectorySandbox) -> None:
    for i in range(20):
        await sandbox.write_text("MEMORY.md", f"version {i}")
    assert leftovers(sandbox.root) == []
    assert sorted(p.name for p in sandbox.root.iterdir()) == ["MEMORY.md"]


async def test_readers_never_see_partial_content(sandbox: LocalDirectorySandbox) -> None:
    # Two large versions that differ everywhere: a torn read would mix or shorten them.
    versions = ["甲" * 400_000 + "end-a", "b" * 1_500_000 + "end-b"]
    await sandbox.write_text("MEMORY.md", versions[0])
    seen: list[str | None] = []
    done = anyio.Event()

    async def writer() -> None:
        for i in range(30):
            await sandbox.write_text("MEMORY.md", versions[i % 2])
        done.set()

    async def reader() -> None:
        while not done.is_set():
            seen.append(await sandbox.read_text("MEMORY.md"))

    async with anyio.create_task_group() as group:
        group.start_soon(writer)
        for _ in range(3):
            group.start_soon(reader)

    assert len(seen) >= 3
    torn = [len(text or "") for text in seen if text not in versions]
    assert torn == []
    assert leftovers(sandbox.root) == []


async def test_failed_write_keeps_old_content_and_cleans_up(
    sandbox: LocalDirectorySandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    await sandbox.write_text("USER.md", "old")

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(SandboxError, match="No space left on device") as caught:
        await sandbox.write_text("USER.md", "new")
    monkeypatch.undo()
    assert isinstance(caught.value.__cause__, OSError)
    assert await sandbox.read_text("USER.md") == "old"
    assert leftovers(sandbox.root) == []


# Filesystem errors


async def test_writing_over_a_directory_is_a_sandbox_error(
    sandbox: LocalDirectorySandbox,
) -> None:
    # Runs as root too, where permission bits would not stop the write.
    (sandbox.root / "USER.md").mkdir(parents=True)
    with pytest.raises(SandboxError, match=r"'USER\.md'") as caught:
        await sandbox.write_text("USER.md", "x")
    assert isinstance(caught.value.__cause__, IsADirectoryError)
    assert leftovers(sandbox.root) == []
    with pytest.raises(SandboxError) as read_error:
        await sandbox.read_text("USER.md")
    assert isinstance(read_error.value.__cause__, IsADirectoryError)


async def test_file_where_a_directory_is_expected(sandbox: LocalDirectorySandbox) -> None:
    await sandbox.write_text("notes", "a file, not a folder")
    with pytest.raises(SandboxError) as caught:
        await sandbox.write_text("notes/today.md", "x")
    assert isinstance(caught.value.__cause__, OSError)


async def test_unusable_root_is_a_sandbox_error(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    sandbox = LocalSandboxProvider(blocker / "sandboxes").for_user("u1")
    with pytest.raises(SandboxError) as caught:
        await sandbox.write_text("USER.md", "x")
    assert isinstance(caught.value.__cause__, OSError)
    with pytest.raises(SandboxError, match="not a directory"):
        await LocalDirectorySandbox(blocker).list()


async def test_undecodable_file_is_a_clear_error(sandbox: LocalDirectorySandbox) -> None:
    sandbox.root.mkdir()
    (sandbox.root / "USER.md").write_bytes(b"ok \xff\xfe bad")
    with pytest.raises(SandboxError, match=r"not valid UTF-8 \(byte 0xff at offset 3\)") as caught:
        await sandbox.read_text("USER.md")
    assert isinstance(caught.value.__cause__, UnicodeDecodeError)


async def test_an_undecodable_file_is_refused_with_its_bytes_and_written_back_as_them(
    sandbox: LocalDirectorySandbox,
) -> None:
    sandbox.root.mkdir()
    raw = "- 我喜欢喝乌龙茶\n".encode("gbk")
    (sandbox.root / "MEMORY.md").write_bytes(raw)
    with pytest.raises(SandboxEncodingError) as caught:
        await sandbox.read_text("MEMORY.md")
    copy = caught.value.text
    assert isinstance(copy, Undecodable) and copy.data == raw
    assert copy == raw.decode("utf-8", errors="replace")  # what a text-only sandbox writes
    await sandbox.write_text("copy.md", copy)
    assert (sandbox.root / "copy.md").read_bytes() == raw


@pytest.mark.parametrize(
    ("data", "text"),
    [
        ("é\r\n".encode(), "é\r\n"),
        ("\ufeffé".encode(), "\ufeffé"),  # a UTF-8 mark is text, kept as it is
        (codecs.BOM_UTF16_LE + "乌龙茶\n".encode("utf-16-le"), "乌龙茶\n"),
        (codecs.BOM_UTF16_BE + "乌龙茶\n".encode("utf-16-be"), "乌龙茶\n"),
        (codecs.BOM_UTF16_LE, ""),
    ],
)
def test_decode_text_reads_utf8_and_utf16_after_its_mark(data: bytes, text: str) -> None:
    assert decode_text(data) == text


@pytest.mark.parametrize(
    "data",
    [
        "乌龙茶".encode("utf-16-le"),  # no mark: a guess
        "a".encode("utf-32"),  # FF FE 00 00: not UTF-16
        codecs.BOM_UTF16_LE + b"a",  # an odd number of bytes
        codecs.BOM_UTF16_LE + "\ud800".encode("utf-16-le", "surrogatepass"),
    ],
    ids=["utf-16-no-mark", "utf-32", "odd-length", "lone-surrogate"],
)
def test_decode_text_refuses_what_is_not_certainly_text(data: bytes) -> None:
    with pytest.raises(UnicodeDecodeError):
        decode_text(data)


async def test_unencodable_text_is_refused(sandbox: LocalDirectorySandbox) -> None:
    with pytest.raises(SandboxError, match="lone surrogate at position 1"):
        await sandbox.write_text("USER.md", "a\ud800b")
    assert await sandbox.read_text("USER.md") is None


# Confinement


@pytest.mark.parametrize(
    "path",
    ["../x", "/etc/passwd", "a/../../x", "..", "USER.md\x00.txt", "", ".", "a/.."],
)
async def test_escaping_paths_are_refused(sandbox: LocalDirectorySandbox, path: str) -> None:
    for operation in (
        sandbox.read_text(path),
        sandbox.write_text(path, "x"),
        sandbox.exists(path),
        sandbox.delete(path),
    ):
        with pytest.raises(SandboxPathError):
            await operation
    assert not sandbox.root.exists()


async def test_symlinked_directory_pointing_outside_is_refused(
    sandbox: LocalDirectorySandbox, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("secret")
    sandbox.root.mkdir()
    (sandbox.root / "link").symlink_to(outside, target_is_directory=True)
    with pytest.raises(SandboxPathError, match="symlink"):
        await sandbox.read_text("link/secret.md")
    with pytest.raises(SandboxPathError):
        await sandbox.write_text("link/new.md", "x")
    with pytest.raises(SandboxPathError):
        await sandbox.delete("link/secret.md")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.md"]
    assert await sandbox.list() == []


async def test_symlinked_file_pointing_outside_is_refused(
    sandbox: LocalDirectorySandbox, tmp_path: Path
) -> None:
    outside = tmp_path / "secret.md"
    outside.write_text("secret")
    sandbox.root.mkdir()
    (sandbox.root / "USER.md").symlink_to(outside)
    (sandbox.root / "dangling.md").symlink_to(tmp_path / "not-yet.md")
    with pytest.raises(SandboxPathError):
        await sandbox.read_text("USER.md")
    with pytest.raises(SandboxPathError):
        await sandbox.write_text("USER.md", "overwritten")
    with pytest.raises(SandboxPathError):
        await sandbox.write_text("dangling.md", "created outside")
    assert outside.read_text() == "secret"
    assert not (tmp_path / "not-yet.md").exists()
    assert await sandbox.list() == []


async def test_link_outside_pointing_back_inside_cannot_delete_outside(
    sandbox: LocalDirectorySandbox, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    await sandbox.write_text("target.md", "inside")
    (outside / "back.md").symlink_to(sandbox.root / "target.md")
    (sandbox.root / "out").symlink_to(outside, target_is_directory=True)
    # Reading resolves inside the sandbox, but unlinking would remove a name outside it.
    assert await sandbox.read_text("out/back.md") == "inside"
    with pytest.raises(SandboxPathError):
        await sandbox.delete("out/back.md")
    assert (outside / "back.md").is_symlink()


async def test_symlinks_inside_the_sandbox_are_followed(
    sandbox: LocalDirectorySandbox, tmp_path: Path
) -> None:
    await sandbox.write_text("real/notes.md", "v1")
    (sandbox.root / "alias").symlink_to(sandbox.root / "real", target_is_directory=True)
    (sandbox.root / "short.md").symlink_to("real/notes.md")
    assert await sandbox.read_text("alias/notes.md") == "v1"
    await sandbox.write_text("short.md", "v2")
    assert (sandbox.root / "short.md").is_symlink()
    assert (sandbox.root / "real" / "notes.md").read_text() == "v2"
    assert await sandbox.list() == ["real/notes.md", "short.md"]
    await sandbox.delete("short.md")
    assert (sandbox.root / "real" / "notes.md").read_text() == "v2"


async def test_sandbox_root_may_itself_be_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "real-root").mkdir()
    (tmp_path / "root-link").symlink_to(tmp_path / "real-root", target_is_directory=True)
    sandbox = LocalDirectorySandbox(tmp_path / "root-link")
    await sandbox.write_text("USER.md", "ok")
    assert (tmp_path / "real-root" / "USER.md").read_text() == "ok"
    assert await sandbox.list() == ["USER.md"]
