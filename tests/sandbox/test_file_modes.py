"""The local sandboxes hold the user's memory: private to the service's account by default,
like PostgreSQL's data directory, or shared by a mode the platform chooses."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.runtime import Memstrata
from memstrata.sandbox.file_io import directory_mode
from memstrata.sandbox.local import LocalSandboxProvider


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, which left every sandbox file readable by any local account."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_new_files_and_directories_are_private(tmp_path: Path, umask_022: None) -> None:
    root = tmp_path / "sandboxes"
    box = LocalSandboxProvider(root).for_user("bob")
    asyncio.run(box.write_text(".memstrata/base/USER.md.json", "{}"))
    asyncio.run(box.write_text("USER.md", "- Allergy: penicillin"))
    for directory in (
        root,
        root / "bob",
        root / "bob" / ".memstrata",
        root / "bob" / ".memstrata" / "base",
    ):
        assert mode(directory) == 0o700, directory
    assert mode(root / "bob" / "USER.md") == 0o600
    assert mode(root / "bob" / ".memstrata" / "base" / "USER.md.json") == 0o600


def test_a_shared_mode_for_an_agent_account(tmp_path: Path, umask_022: None) -> None:
    box = LocalSandboxProvider(tmp_path / "s", file_mode=0o660).for_user("bob")
    asyncio.run(box.write_text("USER.md", "x"))
    assert mode(tmp_path / "s" / "bob") == 0o770 & ~0o022  # the umask still applies
    assert mode(tmp_path / "s" / "bob" / "USER.md") == 0o660 & ~0o022


def test_an_existing_file_keeps_its_mode(tmp_path: Path, umask_022: None) -> None:
    box = LocalSandboxProvider(tmp_path / "s").for_user("bob")
    asyncio.run(box.write_text("USER.md", "old"))
    (tmp_path / "s" / "bob" / "USER.md").chmod(0o640)
    asyncio.run(box.write_text("USER.md", "new"))
    assert mode(tmp_path / "s" / "bob" / "USER.md") == 0o640


@pytest.mark.parametrize(
    ("files", "directories"), [(0o600, 0o700), (0o660, 0o770), (0o644, 0o755), (0o400, 0o500)]
)
def test_directory_mode(files: int, directories: int) -> None:
    assert directory_mode(files) == directories


def test_the_runtime_provisions_private_sandboxes(
    settings: Settings, db: Database, tmp_path: Path, umask_022: None
) -> None:
    private = settings.model_copy(update={"sandbox_root": tmp_path / "sandboxes"})
    mem = Memstrata.open(private, database=db, embedder=None)
    try:
        asyncio.run(mem.sync.provision_user("carol"))
    finally:
        mem.close()
    user_md = tmp_path / "sandboxes" / "carol" / "USER.md"
    assert user_md.is_file() and mode(user_md) == 0o600
    assert mode(user_md.parent) == 0o700


@pytest.mark.parametrize("value", ["600", "0600", "660"])
def test_the_setting_takes_octal_modes(value: str) -> None:
    assert Settings(sandbox_file_mode=value).sandbox_file_mode == value


@pytest.mark.parametrize("value", ["9", "0o600", "6000", "rw-------", ""])
def test_the_setting_refuses_other_text(value: str) -> None:
    with pytest.raises(ValidationError, match="sandbox_file_mode"):
        Settings(sandbox_file_mode=value)
