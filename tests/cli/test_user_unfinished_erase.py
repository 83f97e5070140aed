"""An erase killed while it removed a user's sandbox: ``memstrata user list`` shows what it
left, and running the erase again finishes it.

The erase renames ``<root>/<user dir>`` to ``<root>/.<user dir>.erasing`` and removes that;
a kill in the middle (SIGKILL, a reboot) leaves the directory with the rest of the user's
files. Here that state is made as the kill leaves it — the renamed directory, partly
removed, with the DB rows still there (the kill came before the row deletion) or gone
(after it) — on the test database and a real sandbox root, the CLI through Typer's runner.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.memory.store import MemoryStore
from memstrata.sandbox.dir_names import safe_dir_name
from memstrata.sandbox.erasing import aside_name, unfinished_erasures, user_of
from tests.cli.cli_env import run_cli


def cut_short(root: Path, user_id: str) -> Path:
    """What an erase killed mid-removal leaves: the renamed directory, some files still in it."""
    aside = root / aside_name(safe_dir_name(user_id))
    (aside / "sessions" / "s1").mkdir(parents=True)
    (aside / "MEMORY.md").write_text("- home address: 1 Secret Road\n")
    (aside / "sessions" / "s1" / "USER.md").write_text("- Name: Carol\n")
    return aside


def test_list_reports_an_unfinished_erase_and_the_erase_finishes_it(
    store: MemoryStore, boxes: Path
) -> None:
    store.provision_default_files("carol")  # killed before the rows went: still listed
    aside = cut_short(boxes, "carol")

    code, out, err = run_cli("user", "list")

    assert code == 0, err
    assert out.splitlines()[1].startswith("carol ")  # the table as before, on stdout
    assert err.splitlines() == [
        f"warning: an erase cut short left {aside} (sandbox files of 'carol'); "
        "run `memstrata user erase --user carol --yes` to finish it"
    ]
    code, out, err = run_cli("user", "list", "--json")
    assert code == 0 and out.startswith("[")  # the array a script reads is unchanged
    assert str(aside) in err

    code, out, err = run_cli("user", "erase", "--user", "carol", "--yes")

    assert code == 0, err
    assert not aside.exists() and list(boxes.iterdir()) == []
    code, out, err = run_cli("user", "list")
    assert (code, out, err) == (0, "no users\n", "")


def test_the_erase_finishes_it_after_the_rows_went_too(store: MemoryStore, boxes: Path) -> None:
    # Killed in the second removal, after the rows' deletion: only the directory is left.
    user = "o'neil x"
    aside = cut_short(boxes, user)

    code, out, err = run_cli("user", "list")
    assert (code, out) == (0, "no users\n")
    assert "run `memstrata user erase --user 'o'\"'\"'neil x' --yes` to finish it" in err

    code, out, err = run_cli("user", "erase", "--user", user, "--yes")
    assert code == 0, err
    assert "sandbox                  removed" in out
    assert not aside.exists()


def test_a_hashed_directory_name_is_reported_for_removal_by_hand(boxes: Path) -> None:
    user = "Ü" * 60  # over 120 encoded characters: the directory name is hashed
    aside = cut_short(boxes, user)

    code, _, err = run_cli("user", "list")

    assert code == 0
    assert err.splitlines() == [
        f"warning: an erase cut short left {aside} (sandbox files of a user whose id its "
        "name does not give); remove it by hand"
    ]
    assert run_cli("user", "erase", "--user", user, "--yes")[0] == 0  # its user knows
    assert not aside.exists()


@pytest.mark.parametrize(
    "user",
    ["alice", "Alice", "o'neil x", "用户-1", "a.b", "..", "x%41", "a" * 100, "Ü" * 20],
)
def test_a_directory_name_gives_its_user_back(user: str) -> None:
    assert user_of(safe_dir_name(user)) == user


@pytest.mark.parametrize("name", ["Ü" * 60, "has space", "%ZZ", "%C3", "", "%00"])
def test_a_name_safe_dir_name_does_not_make_gives_no_user(name: str) -> None:
    dir_name = safe_dir_name(name) if name == "Ü" * 60 else name
    assert user_of(dir_name) is None


def test_only_erasure_directories_are_found(tmp_path: Path) -> None:
    assert unfinished_erasures(tmp_path / "none") == []
    for name in ("alice", ".erasing", ".alice.erasing", ".bob.erasing.x", "x.erasing"):
        (tmp_path / name).mkdir()
    assert [(e.path.name, e.user_id) for e in unfinished_erasures(tmp_path)] == [
        (".alice.erasing", "alice")
    ]
