"""The local sandbox provider's user and session directories, and the pure rules for sandbox
paths: normalising, root memory files, protected files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memstrata.errors import InvalidUserIdError, ProtectedFileError, SandboxPathError
from memstrata.sandbox import (
    LocalDirectorySandbox,
    LocalSandboxProvider,
    check_agent_write,
    normalise_sandbox_path,
    root_memory_file,
    safe_dir_name,
)

pytestmark = pytest.mark.anyio


# Provider and user-id mapping


def test_user_ids_map_to_distinct_safe_names() -> None:
    ids = ["a/b", "a_b", "a%2Fb", "..", ".", "用户1", "Alice", "alice", "a b", "a~b", "-", "_"]
    names = [safe_dir_name(i) for i in ids]
    assert names == [
        "a%2Fb",
        "a_b",
        "a%252%46b",
        "%2E%2E",
        "%2E",
        "%E7%94%A8%E6%88%B71",
        "%41lice",
        "alice",
        "a%20b",
        "a%7Eb",
        "-",
        "_",
    ]
    assert len({name.casefold() for name in names}) == len(ids)


def test_long_ids_are_hashed_and_stay_distinct() -> None:
    long_ids = ["用" * 100, "用" * 99 + "户", "x" * 119 + "/", "x" * 121]
    names = [safe_dir_name(i) for i in long_ids]
    assert len(set(names)) == len(long_ids)
    for name in names:
        assert len(name.encode()) <= 97  # 64 kept + "~" + 32 hex digits
        assert "~" in name and "/" not in name
    assert names[0].startswith("%E7%94%A8" * 7 + "~")  # cut before a torn escape
    assert safe_dir_name("x" * 120) == "x" * 120
    assert safe_dir_name("x" * 121) != safe_dir_name("x" * 122)


async def test_provider_layout(tmp_path: Path) -> None:
    provider = LocalSandboxProvider(tmp_path)
    assert provider.directory_for("u1") == tmp_path / "u1"
    assert provider.directory_for("a/b", "s/1") == tmp_path / "a%2Fb" / "sessions" / "s%2F1"
    user_box = provider.for_user("..")
    await user_box.write_text("USER.md", "dots")
    assert (tmp_path / "%2E%2E" / "USER.md").read_text() == "dots"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["%2E%2E"]
    session_box = provider.for_user("..", "s1")
    await session_box.write_text("USER.md", "session")
    assert await user_box.read_text("USER.md") == "dots"
    assert await user_box.list() == ["USER.md", "sessions/s1/USER.md"]


async def test_users_do_not_share_files(tmp_path: Path) -> None:
    provider = LocalSandboxProvider(tmp_path)
    ids = ["a/b", "a_b", "..", "用户1", "a%2Fb"]
    for user_id in ids:
        await provider.for_user(user_id).write_text("USER.md", user_id)
    for user_id in ids:
        assert await provider.for_user(user_id).read_text("USER.md") == user_id
    assert len(list(tmp_path.iterdir())) == len(ids)


def test_empty_ids_are_refused(tmp_path: Path) -> None:
    provider = LocalSandboxProvider(tmp_path)
    with pytest.raises(InvalidUserIdError):
        provider.for_user("")
    with pytest.raises(SandboxPathError):
        provider.for_user("u1", "")


# Pure path helpers


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("USER.md", "USER.md"),
        ("./USER.md", "USER.md"),
        ("/workspace/USER.md", "USER.md"),
        ("/workspace//notes/./a.md", "notes/a.md"),
        ("notes/../USER.md", "USER.md"),
        ("/workspace/notes/../USER.md", "USER.md"),
        ("../USER.md", None),
        ("a/../../USER.md", None),
        ("/workspace/../etc/passwd", None),
        ("/workspacefoo/USER.md", None),
        ("/etc/passwd", None),
        ("/workspace", None),
        ("", None),
        (".", None),
        ("USER.md\x00", None),
    ],
)
def test_normalise_sandbox_path(path: str, expected: str | None) -> None:
    assert normalise_sandbox_path(path) == expected


def test_normalise_with_custom_prefixes() -> None:
    assert normalise_sandbox_path("/home/agent/USER.md", ["/home/agent/"]) == "USER.md"
    assert normalise_sandbox_path("/workspace/USER.md", ["/home/agent"]) is None
    assert normalise_sandbox_path("/workspace/USER.md", []) is None


@pytest.mark.parametrize(
    ("path", "case_sensitive", "expected"),
    [
        ("USER.md", True, "USER.md"),
        ("./MEMORY.md", True, "MEMORY.md"),
        ("/workspace/SOUL.md", True, "SOUL.md"),
        ("AGENTS.md", True, "AGENTS.md"),
        ("agents.md", True, None),
        ("agents.md", False, "AGENTS.md"),
        ("/workspace/User.MD", False, "USER.md"),
        ("AGENTſ.md", False, "AGENTS.md"),  # long s case-folds to s
        ("notes/USER.md", False, None),
        ("USER.md.bak", False, None),
        ("../USER.md", False, None),
    ],
)
def test_root_memory_file(path: str, case_sensitive: bool, expected: str | None) -> None:
    assert root_memory_file(path, case_sensitive=case_sensitive) == expected


def test_check_agent_write() -> None:
    assert check_agent_write("/workspace/USER.md", case_sensitive=True) == "USER.md"
    assert check_agent_write("agents.md", case_sensitive=True) == "agents.md"
    with pytest.raises(ProtectedFileError, match=r"MEMORY\.md"):
        check_agent_write("./AGENTS.md", case_sensitive=True)
    with pytest.raises(ProtectedFileError):
        check_agent_write("/workspace/agents.md", case_sensitive=False)
    with pytest.raises(SandboxPathError):
        check_agent_write("../AGENTS.md", case_sensitive=True)


def test_local_sandbox_reports_case_sensitivity(tmp_path: Path) -> None:
    assert LocalDirectorySandbox(tmp_path, case_sensitive=False).case_sensitive is False
    if os.uname().sysname == "Linux":
        assert LocalDirectorySandbox(tmp_path).case_sensitive is True
