"""``LocalSandboxProvider.erase_user`` on real directories: the user's tree goes, links are
never followed, a symlinked user directory is refused, and running it again is harmless."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.errors import SandboxError, SandboxPathError
from memstrata.sandbox.base import ErasableSandboxProvider
from memstrata.sandbox.dir_names import safe_dir_name
from memstrata.sandbox.local import LocalSandboxProvider


def write(path: Path, content: str = "x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)


@pytest.fixture
def provider(tmp_path: Path) -> LocalSandboxProvider:
    return LocalSandboxProvider(tmp_path / "boxes")


def test_the_users_tree_goes_and_links_in_it_are_not_followed(
    provider: LocalSandboxProvider, tmp_path: Path
) -> None:
    assert isinstance(provider, ErasableSandboxProvider)
    alice = provider.directory_for("Alice W.")
    write(alice / "USER.md")
    write(provider.directory_for("Alice W.", "session 1") / "notes" / "today.md")
    write(tmp_path / "outside" / "keep.md", "not alice's")
    (alice / "out").symlink_to(tmp_path / "outside", target_is_directory=True)
    (alice / "keep-link.md").symlink_to(tmp_path / "outside" / "keep.md")
    write(provider.directory_for("bob") / "USER.md", "bob")

    assert provider.erase_user("Alice W.") is True

    assert sorted(p.name for p in provider.root.iterdir()) == ["bob"]
    assert (tmp_path / "outside" / "keep.md").read_text() == "not alice's"
    assert (provider.directory_for("bob") / "USER.md").read_text() == "bob"
    assert provider.erase_user("Alice W.") is False  # again: nothing there
    assert LocalSandboxProvider(tmp_path / "never-made").erase_user("alice") is False


def test_a_symlinked_user_directory_is_refused_and_left_alone(
    provider: LocalSandboxProvider,
) -> None:
    """alice's directory is a link to bob's: erasing alice must not delete bob's files."""
    write(provider.directory_for("bob") / "USER.md", "bob")
    provider.directory_for("alice").symlink_to(
        provider.directory_for("bob"), target_is_directory=True
    )
    with pytest.raises(SandboxPathError, match="symlink"):
        provider.erase_user("alice")
    assert provider.directory_for("alice").is_symlink()
    assert (provider.directory_for("bob") / "USER.md").read_text() == "bob"


def test_a_file_in_place_of_the_directory_is_refused(provider: LocalSandboxProvider) -> None:
    write(provider.directory_for("alice"), "not a directory")
    with pytest.raises(SandboxError, match="not a directory"):
        provider.erase_user("alice")
    assert provider.directory_for("alice").read_text() == "not a directory"


def test_what_an_erase_cut_short_left_is_removed_by_the_next(
    provider: LocalSandboxProvider,
) -> None:
    aside = provider.root / f".{safe_dir_name('alice')}.erasing"
    write(aside / "sessions" / "s" / "USER.md")
    write(provider.directory_for("alice") / "USER.md")  # written again since
    assert provider.erase_user("alice") is True
    assert list(provider.root.iterdir()) == []
    write(aside / "USER.md")
    assert provider.erase_user("alice") is True  # only the leftover
    assert list(provider.root.iterdir()) == []
