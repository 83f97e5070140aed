"""A PostgreSQL without pgvector: start-up and migration fail loudly (spec §4).

Runs the machine's system PostgreSQL 15, whose packages ship no pgvector.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memstrata.cli import build_app
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.errors import PgvectorMissingError

PG15 = Path("/usr/lib/postgresql/15/bin")


def _run_as(user: str | None, args: list[str]) -> None:
    cmd = args if user is None else ["runuser", "-u", user, "--", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr or done.stdout}")


@pytest.fixture(scope="module")
def plain_postgres_url() -> Iterator[str]:
    if not (PG15 / "initdb").exists():
        pytest.fail(f"system PostgreSQL 15 not found at {PG15}: apt-get install postgresql-15")
    # Not under pytest's tmp dir: that is private to root and the server runs as postgres.
    root = Path(tempfile.mkdtemp(prefix="memstrata-pg15-"))
    pgdata, sock = root / "data", root / "sock"
    sock.mkdir()
    user = None
    if os.geteuid() == 0:  # postgres refuses to run as root
        user = "postgres"
        pw = pwd.getpwnam(user)
        os.chmod(root, 0o755)
        for p in (root, sock):
            os.chown(p, pw.pw_uid, pw.pw_gid)
    _run_as(user, [str(PG15 / "initdb"), "-D", str(pgdata), "-U", "postgres", "--auth=trust"])
    _run_as(
        user,
        [
            str(PG15 / "pg_ctl"),
            "-D",
            str(pgdata),
            "-w",
            "-l",
            str(root / "log"),
            "-o",
            f"-h '' -k {sock}",
            "start",
        ],
    )
    try:
        yield f"postgresql://postgres@/postgres?host={sock}"
    finally:
        _run_as(user, [str(PG15 / "pg_ctl"), "-D", str(pgdata), "-m", "immediate", "stop"])
        shutil.rmtree(root, ignore_errors=True)


def test_startup_fails_without_pgvector(plain_postgres_url: str, tmp_path: Path) -> None:
    settings = Settings(environment="test", database_url=plain_postgres_url, data_dir=tmp_path)
    with pytest.raises(PgvectorMissingError, match="pgvector") as info:
        Database.open(settings)
    assert "install pgvector" in str(info.value)


def test_cli_upgrade_fails_with_instructions(
    plain_postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSTRATA_DATABASE_URL", plain_postgres_url)
    monkeypatch.setenv("MEMSTRATA_DATA_DIR", str(tmp_path))
    result = CliRunner().invoke(build_app(), ["db", "upgrade"])
    assert result.exit_code == 1
    assert "pgvector" in result.output
    assert "MEMSTRATA_DATABASE_URL" in result.output
