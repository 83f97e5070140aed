"""A backup and its restore for real: a migrated scratch database on the session's server,
``pg_dump -Fc`` and ``pg_restore --clean`` with the embedded PostgreSQL's own programs
(docs/DEPLOY.md, "Backup and restore"), and ``memstrata db restored`` run as the CLI."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, make_url, text

from memstrata.config import Settings
from memstrata.db.database import Database
from tests.cli.cli_env import clean_env, run_cli

from .read_only import BIN

DRILL = "restore_drill"


@dataclass(frozen=True)
class Drill:
    """The scratch database, its settings (a sandbox root of its own) and its dump file."""

    url: str
    settings: Settings
    dump_file: Path

    def sql(self, statement: str, **params: Any) -> list[Any]:
        """The rows of one statement (none for a statement that returns none), committed."""
        engine = create_engine(self.url)
        try:
            with engine.begin() as conn:
                result = conn.execute(text(statement), params)
                return list(result.all()) if result.returns_rows else []
        finally:
            engine.dispose()

    def _conninfo(self) -> str:
        url = make_url(self.url)
        return f"host={url.query['host']} user={url.username} dbname={url.database}"

    def dump(self) -> None:
        """The backup: ``pg_dump -Fc`` of the live database."""
        _run(BIN / "pg_dump", "-Fc", "-f", self.dump_file, "-d", self._conninfo())

    def restore(self) -> None:
        """The disaster's fix: the backup restored over the database, in place (the tables
        dropped and created again; connections left open stay open)."""
        _run(
            BIN / "pg_restore", "--clean", "--if-exists", "--exit-on-error",
            "-d", self._conninfo(), self.dump_file,
        )  # fmt: skip

    def restored(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
        """``memstrata db restored`` on the database: its JSON summary (exit status 0)."""
        code, out, err = run_restored(monkeypatch, tmp_path, self.url)
        assert (code, err) == (0, ""), err
        summary: dict[str, Any] = json.loads(out)
        return summary


def _run(*args: object) -> None:
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr


def run_restored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, url: str) -> tuple[int, str, str]:
    clean_env(monkeypatch, tmp_path, {"MEMSTRATA_DATABASE_URL": url})
    return run_cli("db", "restored")


@pytest.fixture
def drill(pg_url: str, settings: Settings, tmp_path: Path) -> Iterator[Drill]:
    """A new, migrated database on the session's server, dropped afterwards."""
    admin = create_engine(make_url(pg_url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {DRILL} WITH (FORCE)"))
        conn.execute(text(f"CREATE DATABASE {DRILL}"))
    url = make_url(pg_url).set(database=DRILL).render_as_string(hide_password=False)
    own = settings.model_copy(update={"database_url": url})
    Database.open(own).close()  # migrated to head
    yield Drill(url, own, tmp_path / "memstrata.dump")
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {DRILL} WITH (FORCE)"))
    admin.dispose()
