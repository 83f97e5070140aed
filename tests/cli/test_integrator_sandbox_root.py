"""A sandbox root that starts with ``~`` is refused at start: only a shell expands ``~``,
and a value from a .env file, a systemd unit or a compose file arrives as typed, so the
sandboxes would be written, without an error, to a directory named ``~`` in the working
directory while the operator looks in their home."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.cli.local_dirs import local_dir_problem
from memstrata.config import Settings
from tests.cli.cli_env import clean_env, run_cli


@pytest.mark.parametrize("root", ["~/sandboxes", "~", "~alice/sandboxes"])
def test_a_root_with_an_unexpanded_tilde_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, root: str
) -> None:
    monkeypatch.chdir(tmp_path)
    problem = local_dir_problem(
        Settings(environment="test", data_dir=tmp_path / "d", sandbox_root=root)
    )
    first = root.split("/")[0]
    assert problem == (
        f"MEMSTRATA_SANDBOX_ROOT: the sandbox root {root} starts with '~', which only a shell "
        f"expands: as given it is {tmp_path / root}, a directory named {first!r} in the "
        "working directory; set MEMSTRATA_SANDBOX_ROOT to an absolute path"
    )


def test_an_unexpanded_data_dir_names_the_data_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Unset, the sandbox root is <MEMSTRATA_DATA_DIR>/sandboxes: the data directory is
    the setting to fix."""
    monkeypatch.chdir(tmp_path)
    problem = local_dir_problem(Settings(environment="test", data_dir=Path("~/memstrata")))
    assert problem is not None
    assert problem.startswith(
        "MEMSTRATA_SANDBOX_ROOT (unset: <MEMSTRATA_DATA_DIR>/sandboxes): the sandbox root "
        "~/memstrata/sandboxes starts with '~'"
    )
    assert problem.endswith("; set MEMSTRATA_DATA_DIR to an absolute path")


@pytest.mark.parametrize("root", ["boxes", "a~/b"])
def test_a_tilde_elsewhere_or_a_relative_root_passes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, root: str
) -> None:
    monkeypatch.chdir(tmp_path)
    assert (
        local_dir_problem(Settings(environment="test", data_dir=tmp_path, sandbox_root=root))
        is None
    )


def test_serve_refuses_it_before_starting_anything(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env(
        monkeypatch,
        tmp_path,
        {
            "MEMSTRATA_DATA_DIR": str(tmp_path / "data"),
            "MEMSTRATA_SANDBOX_ROOT": "~/sandboxes",
            # Were the root let through, start-up would stop here at once, not serve.
            "MEMSTRATA_DATABASE_URL": "postgresql://memstrata@127.0.0.1:1/memstrata",
            "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
        },
    )
    code, out, err = run_cli("serve", "--port", "0")
    assert (code, out) == (1, "")
    [line] = err.splitlines()
    assert line.startswith("error: MEMSTRATA_SANDBOX_ROOT: the sandbox root ~/sandboxes ")
    assert line.endswith("set MEMSTRATA_SANDBOX_ROOT to an absolute path")
    assert not (tmp_path / "~").exists() and not (tmp_path / "data").exists()
