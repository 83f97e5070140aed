"""``memstrata serve`` refuses to start, in one line naming the setting and the path, on a
skill directory that does not exist or a sandbox root it cannot write
(``memstrata.cli.local_dirs``); both were noticed only at first use, as warnings.

The database URL points at a port nobody listens on: had the check not come first, the
command would fail on the database instead, with another message.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from memstrata.cli.local_dirs import local_dir_problem
from memstrata.config import Settings
from tests.cli.cli_env import clean_env, run_cli
from tests.small_fs import SmallFs, small_fs  # noqa: F401  (a fixture)

NOBODY = "postgresql+psycopg://nobody@127.0.0.1:1/none"


def serve(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    command: tuple[str, ...] = ("serve", "--port", "0"),
    **settings: str,
) -> tuple[int, str]:
    clean_env(
        monkeypatch,
        tmp_path,
        {
            "MEMSTRATA_DATA_DIR": str(tmp_path / "data"),
            "MEMSTRATA_DATABASE_URL": NOBODY,
            "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
            "MEMSTRATA_JWT_SECRET": "s" * 40,
            "MEMSTRATA_LOG_JSON": "false",
            **{f"MEMSTRATA_{k.upper()}": v for k, v in settings.items()},
        },
    )
    code, _out, err = run_cli(*command)
    return code, err.strip()


@pytest.mark.parametrize(
    "command", [("serve", "--port", "0"), ("mcp", "--user", "alice")], ids=["serve", "mcp-stdio"]
)
def test_a_skill_directory_that_does_not_exist(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: tuple[str, ...]
) -> None:
    missing = tmp_path / "skils"  # a typo
    code, err = serve(monkeypatch, tmp_path, command, skill_dirs=json.dumps([str(missing)]))
    assert code == 1
    assert err.splitlines()[-1] == (
        f"error: MEMSTRATA_SKILL_DIRS: {missing} does not exist; create it (one folder per skill "
        "with a SKILL.md) or remove it from MEMSTRATA_SKILL_DIRS"
    )


def test_a_sandbox_root_that_is_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "sandboxes"
    blocker.write_text("a file where the sandbox root should be")
    code, err = serve(monkeypatch, tmp_path, sandbox_root=str(blocker))
    assert code == 1
    assert err.splitlines()[-1] == (
        f"error: MEMSTRATA_SANDBOX_ROOT: cannot write the sandbox root {blocker}: {blocker} is not "
        "a directory; set MEMSTRATA_SANDBOX_ROOT to a directory this user can write"
    )


def settings_for(tmp_path: Path, **values: object) -> Settings:
    return Settings(environment="test", data_dir=tmp_path / "data", **values)  # type: ignore[arg-type]


def test_a_sandbox_root_on_a_read_only_file_system(
    small_fs: SmallFs,  # noqa: F811
    tmp_path: Path,
) -> None:
    disk = small_fs("1m")
    remounted = subprocess.run(
        ["mount", "-o", "remount,ro", str(disk)], capture_output=True, text=True
    )
    if remounted.returncode != 0:
        pytest.skip(f"cannot remount read-only: {remounted.stderr.strip()}")
    problem = local_dir_problem(settings_for(tmp_path, sandbox_root=disk / "sandboxes"))
    assert problem == (
        f"MEMSTRATA_SANDBOX_ROOT: cannot write the sandbox root {disk / 'sandboxes'}: {disk} "
        "is on a read-only file system; set MEMSTRATA_SANDBOX_ROOT to a directory this user "
        "can write"
    )


CHECK_AS_NOBODY = """
import sys
from pathlib import Path
from memstrata.cli.local_dirs import local_dir_problem
from memstrata.config import Settings
root = Path(sys.argv[1])
settings = Settings(environment="test", data_dir=root / "data", sandbox_root=root / "locked" / "s")
print(local_dir_problem(settings))
"""


def test_a_sandbox_root_this_user_may_not_write() -> None:
    # Root may write any directory, so as root (CI) the check runs as ``nobody``; the
    # directories sit in a world-readable temporary directory (pytest's are root's only).
    base = Path(tempfile.mkdtemp(prefix="memstrata-locked-"))
    try:
        base.chmod(0o755)
        locked = base / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        command = [sys.executable, "-c", CHECK_AS_NOBODY, str(base)]
        if os.geteuid() == 0:
            command = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert f"this user may not create files in {locked}" in done.stdout
    finally:
        shutil.rmtree(base)


def test_the_default_sandbox_root_is_named_by_its_setting(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("a file where the data directory should be")
    problem = local_dir_problem(settings_for(tmp_path))
    assert problem is not None
    assert problem.startswith(
        "MEMSTRATA_SANDBOX_ROOT (unset: <MEMSTRATA_DATA_DIR>/sandboxes): cannot write the "
        f"sandbox root {tmp_path / 'data' / 'sandboxes'}: {tmp_path / 'data'} is not a directory"
    )


def test_usable_directories_pass_and_nothing_is_made(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    skills.mkdir()
    settings = settings_for(tmp_path, skill_dirs=[skills], sandbox_root=tmp_path / "a" / "b")
    assert local_dir_problem(settings) is None
    assert not (tmp_path / "a").exists()  # the first write makes it, with its own modes
