"""Replicas do not migrate at start-up: ``memstrata db upgrade`` does, once.

``MEMSTRATA_MIGRATE_ON_START=false`` makes a process refuse a schema that is not at head
(telling the operator what to run) instead of migrating it; the default keeps the
single-process behaviour of migrating on open.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import inspect
from typer.testing import CliRunner

from memstrata.cli import build_app
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.migrate import current_revision, head_revision, schema_head
from memstrata.errors import DatabaseSetupError

from .conftest import ScratchFactory


def _settings(url: str, tmp_path: Path, *, migrate: bool) -> Settings:
    return Settings(
        environment="test", database_url=url, data_dir=tmp_path, migrate_on_start=migrate
    )


def test_the_default_migrates_on_start() -> None:
    assert Settings(environment="test").migrate_on_start is True


def test_replica_refuses_an_unmigrated_schema_until_db_upgrade(
    scratch_database: ScratchFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = scratch_database("replica_unmigrated")
    with pytest.raises(DatabaseSetupError, match=r"run `memstrata db upgrade`"):
        Database.open(_settings(url, tmp_path, migrate=False))

    # The CLI migrates, once.
    monkeypatch.setenv("MEMSTRATA_DATABASE_URL", url)
    monkeypatch.setenv("MEMSTRATA_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MEMSTRATA_MIGRATE_ON_START", "false")
    result = CliRunner().invoke(build_app(), ["db", "upgrade"])
    assert result.exit_code == 0, result.stderr
    head = schema_head()
    assert result.stdout == f"database at revision {head} (was empty)\n"
    again = CliRunner().invoke(build_app(), ["db", "upgrade"])
    assert again.stdout == f"database at revision {head} (already up to date)\n"

    db = Database.open(_settings(url, tmp_path, migrate=False))
    try:
        assert current_revision(db.engine) == head_revision(db.engine)
        assert "user_memory" in inspect(db.engine).get_table_names()
    finally:
        db.close()


def test_replica_refuses_a_schema_behind_head(
    scratch_database: ScratchFactory, tmp_path: Path
) -> None:
    url = scratch_database("replica_behind")
    db = Database.open(_settings(url, tmp_path, migrate=True))
    try:
        head = head_revision(db.engine)
        with db.engine.begin() as conn:
            conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0004'")
    finally:
        db.close()
    with pytest.raises(DatabaseSetupError) as caught:
        Database.open(_settings(url, tmp_path, migrate=False))
    assert f"is at revision 0004, this version of memstrata needs {head}" in str(caught.value)


def test_a_schema_migrated_by_a_newer_release_is_run_on(
    scratch_database: ScratchFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # An old replica restarting during a rollout, or a rollback: the migrations are
    # additive, so it runs (with a warning); `db upgrade` says there is nothing to do here.
    url = scratch_database("replica_ahead")
    db = Database.open(_settings(url, tmp_path, migrate=True))
    try:
        with db.engine.begin() as conn:
            conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999'")
    finally:
        db.close()
    for migrate in (False, True):
        Database.open(_settings(url, tmp_path, migrate=migrate)).close()
    assert any("db.schema_newer" in r.getMessage() for r in caplog.records)

    monkeypatch.setenv("MEMSTRATA_DATABASE_URL", url)
    monkeypatch.setenv("MEMSTRATA_DATA_DIR", str(tmp_path))
    result = CliRunner().invoke(build_app(), ["db", "upgrade"])
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "newer than this release's latest" in result.output, result.output
    # ... and `db status` does not send the operator to that refusal.
    status = CliRunner().invoke(build_app(), ["db", "status"])
    assert status.exit_code == 3, status.output  # not this release's schema (db status)
    assert "run `memstrata db upgrade` to migrate" not in status.output
    assert "a newer memstrata migrated this schema" in status.output
    as_json = CliRunner().invoke(build_app(), ["db", "status", "--json"])
    assert json.loads(as_json.stdout)["newer_than_this_release"] is True


def test_single_process_default_migrates_a_fresh_database(
    scratch_database: ScratchFactory, tmp_path: Path
) -> None:
    url = scratch_database("single_fresh")
    db = Database.open(_settings(url, tmp_path, migrate=True))
    try:
        assert current_revision(db.engine) == head_revision(db.engine)
    finally:
        db.close()
