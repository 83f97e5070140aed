"""What a ``memstrata`` command imports before it does anything.

Importing the CLI imported the runtime, SQLAlchemy, Alembic, FastAPI, uvicorn and numpy
for every command: ~1 s of CPU for ``memstrata --version`` or ``memstrata token``, paid
by each call of a script. The commands now import what they use when they run. Read
from ``python -X importtime``, which names every module the process imports; CPU time
itself is in docs/BENCHMARKS.md ("CLI start-up"), as a test on a shared machine cannot
time it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memstrata.cli.release import VERSIONS_DIR, migration_head
from memstrata.db.migrate import schema_head

HEAVY = frozenset({"fastapi", "uvicorn", "sqlalchemy", "alembic", "numpy", "mcp"})


def imported(tmp_path: Path, *args: str) -> set[str]:
    """The top-level packages ``python -m memstrata.cli ARGS`` imports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env.update(
        MEMSTRATA_DATA_DIR=str(tmp_path / "data"),
        MEMSTRATA_SANDBOX_ROOT=str(tmp_path / "boxes"),
        MEMSTRATA_JWT_SECRET="s" * 40,
    )
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "memstrata.cli", *args],
        env=env,
        cwd=tmp_path,  # no stray .env file
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = (line for line in result.stderr.splitlines() if line.startswith("import time:"))
    return {line.rsplit("|", 1)[1].strip().split(".")[0] for line in lines}


@pytest.mark.parametrize(
    "args",
    [("--version",), ("--help",), ("serve", "--help"), ("db", "--help")],
    ids=" ".join,
)
def test_version_and_help_import_no_heavy_library(tmp_path: Path, args: tuple[str, ...]) -> None:
    modules = imported(tmp_path, *args)
    assert "memstrata" in modules  # the output was read
    assert modules & HEAVY == set()


@pytest.mark.parametrize(
    "args",
    [("token", "--user", "alice"), ("conflicts", "list", "--user", "alice")],
    ids=["token", "conflicts"],
)
def test_token_and_conflicts_import_no_heavy_library(tmp_path: Path, args: tuple[str, ...]) -> None:
    """``token`` needs the JWT code and the settings, ``conflicts`` the sandboxes: none of
    them the HTTP stack, the database or the search."""
    assert imported(tmp_path, *args) & HEAVY == set()


def test_the_schema_revision_read_from_the_files_is_alembics() -> None:
    assert migration_head(VERSIONS_DIR) == schema_head()


def _migration(folder: Path, name: str, revision: str, down: str) -> None:
    (folder / f"{name}.py").write_text(f'"""A migration."""\n\n{revision}\n{down}\n')


def test_the_head_is_the_revision_no_migration_revises(tmp_path: Path) -> None:
    _migration(tmp_path, "a", 'revision = "0001"', "down_revision = None")
    # As newer Alembic templates write them.
    _migration(tmp_path, "b", 'revision: str = "0002"', 'down_revision: str | None = "0001"')
    assert migration_head(tmp_path) == "0002"


@pytest.mark.parametrize(
    ("revision", "down"),
    [
        ('revision = "0003"', 'down_revision = ("0001", "0002")'),  # a merge
        ('revision = "0003"', 'down_revision = "0001"'),  # a branch: two heads
        ("revision = REVISION", 'down_revision = "0002"'),  # not a literal
        ("", 'down_revision = "0002"'),  # no revision line
    ],
    ids=["merge", "branch", "name", "missing"],
)
def test_alembic_decides_what_is_not_a_plain_chain(
    tmp_path: Path, revision: str, down: str
) -> None:
    _migration(tmp_path, "a", 'revision = "0001"', "down_revision = None")
    _migration(tmp_path, "b", 'revision = "0002"', 'down_revision = "0001"')
    _migration(tmp_path, "c", revision, down)
    assert migration_head(tmp_path) is None
