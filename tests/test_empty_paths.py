"""An empty or blank directory setting counts as unset, as an empty MEMSTRATA_DATABASE_URL
does: ``MEMSTRATA_SANDBOX_ROOT=`` (as a templated .env leaves it) is <data_dir>/sandboxes,
not the working directory of whichever process started; likewise MEMSTRATA_DATA_DIR and
MEMSTRATA_TEMPLATE_DIR. A real `memstrata conflicts list` finds the copies there."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.config import Settings
from memstrata.memory.templates import default_template_dir
from tests.api.test_conflicts import AGENT, NAME, plant
from tests.cli.cli_env import clean_env, run_cli

BLANKS = ["", "  ", "\t"]


@pytest.mark.parametrize("blank", BLANKS)
def test_a_blank_sandbox_root_is_under_the_data_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, blank: str
) -> None:
    clean_env(
        monkeypatch,
        tmp_path,
        {"MEMSTRATA_DATA_DIR": str(tmp_path / "data"), "MEMSTRATA_SANDBOX_ROOT": blank},
    )
    settings = Settings()
    assert settings.sandbox_root is None
    assert settings.resolved_sandbox_root == tmp_path / "data" / "sandboxes"


@pytest.mark.parametrize("blank", BLANKS)
def test_a_blank_data_dir_and_template_dir_are_their_defaults(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, blank: str
) -> None:
    clean_env(monkeypatch, tmp_path, {})
    default = Settings()
    monkeypatch.setenv("MEMSTRATA_DATA_DIR", blank)
    monkeypatch.setenv("MEMSTRATA_TEMPLATE_DIR", blank)
    settings = Settings()
    assert settings.data_dir == default.data_dir != Path(".")
    assert settings.resolved_sandbox_root == default.data_dir / "sandboxes"
    assert settings.template_dir is None


def test_empty_in_a_dotenv_file_and_as_keywords(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env(monkeypatch, tmp_path, {})  # runs in tmp_path, where the .env is read
    lines = [
        f"MEMSTRATA_DATA_DIR={tmp_path / 'data'}",
        "MEMSTRATA_SANDBOX_ROOT=",
        "MEMSTRATA_TEMPLATE_DIR=",
    ]
    (tmp_path / ".env").write_text("\n".join(lines) + "\n")
    settings = Settings()
    assert (settings.sandbox_root, settings.template_dir) == (None, None)
    assert settings.resolved_sandbox_root == tmp_path / "data" / "sandboxes"
    kept = Settings(data_dir=tmp_path / "x", sandbox_root="", template_dir=" ")
    assert (kept.resolved_sandbox_root, kept.template_dir) == (tmp_path / "x" / "sandboxes", None)


def test_a_path_that_says_something_is_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``.`` is the working directory on purpose; only a value with nothing in it is unset."""
    clean_env(monkeypatch, tmp_path, {"MEMSTRATA_SANDBOX_ROOT": ".", "MEMSTRATA_DATA_DIR": "d"})
    settings = Settings()
    assert (settings.sandbox_root, settings.data_dir) == (Path("."), Path("d"))
    assert Settings(template_dir=default_template_dir()).template_dir == default_template_dir()


def test_the_cli_reads_the_default_root_when_the_variable_is_empty(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env(
        monkeypatch,
        tmp_path,
        {"MEMSTRATA_DATA_DIR": str(tmp_path / "data"), "MEMSTRATA_SANDBOX_ROOT": ""},
    )
    plant(Settings(data_dir=tmp_path / "data"), "alice", NAME, AGENT)
    (tmp_path / "alice").mkdir()  # what the working directory as root would read: nothing
    code, out, err = run_cli("conflicts", "list", "--user", "alice")
    assert (code, err) == (0, "")
    assert out.splitlines()[-1] == "copies 1-1 of 1, newest first"
