"""`memstrata db status` exits non-zero when the schema is not this release's, so an init
container or a CI step can gate on it: 2 behind (or empty), 3 migrated by a newer release,
each with one line saying what to do (1, an incomplete schema: tests/db/test_schema_complete.py).
Before, both printed `up_to_date False` and exited 0."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, make_url, text

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.migrate import alembic_config, schema_head
from tests.cli.cli_env import clean_env, run_cli

HEAD = schema_head()


def previous_revision() -> str:
    from alembic.script import ScriptDirectory

    assert HEAD is not None
    down = ScriptDirectory.from_config(alembic_config(None)).get_revision(HEAD).down_revision
    assert isinstance(down, str)
    return down


@pytest.fixture
def scratch(pg_url: str, tmp_path: Path) -> Iterator[str]:
    """The URL of a new database on the test server, dropped afterwards."""
    admin = create_engine(make_url(pg_url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text('DROP DATABASE IF EXISTS "status_exit" WITH (FORCE)'))
        conn.execute(text('CREATE DATABASE "status_exit"'))
    yield make_url(pg_url).set(database="status_exit").render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text('DROP DATABASE IF EXISTS "status_exit" WITH (FORCE)'))
    admin.dispose()


def at_revision(url: str, tmp_path: Path, revision: str) -> None:
    """Migrate ``url`` to head, then record ``revision`` as if it were there."""
    Database.open(Settings(environment="test", database_url=url, data_dir=tmp_path)).close()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
    engine.dispose()


def status(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, url: str) -> tuple[int, str, str]:
    clean_env(monkeypatch, tmp_path, {"MEMSTRATA_DATABASE_URL": url})
    code, out, err = run_cli("db", "status", "--json")
    said = json.loads(out)  # stdout stays the one JSON object a script reads
    assert said["up_to_date"] is False and said["head"] == HEAD
    assert err.startswith("error: the schema on ") and err.count("\n") == 1, err
    text_code, table, text_err = run_cli("db", "status")
    assert (text_code, text_err) == (code, err) and "up_to_date  False" in table
    return code, said["current"], err


def test_a_schema_behind_this_release_exits_2(
    scratch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    older = previous_revision()
    at_revision(scratch, tmp_path, older)
    code, current, err = status(monkeypatch, tmp_path, scratch)
    assert (code, current) == (2, older)
    assert err.rstrip().endswith(
        f" is at revision {older}, this release needs {HEAD}: run `memstrata db upgrade`"
    ), err


def test_an_empty_database_exits_2(
    scratch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, current, err = status(monkeypatch, tmp_path, scratch)
    assert (code, current) == (2, None)
    assert err.rstrip().endswith(
        f" has no memstrata schema, this release needs {HEAD}: run `memstrata db upgrade`"
    ), err


def test_a_schema_of_a_newer_release_exits_3(
    scratch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at_revision(scratch, tmp_path, "9999")
    code, current, err = status(monkeypatch, tmp_path, scratch)
    assert (code, current) == (3, "9999")
    assert f" is at revision 9999, newer than this release's latest ({HEAD}): " in err, err
    assert "; upgrade memstrata to that release " in err, err
    assert "run `memstrata db upgrade`" not in err  # its upgrade refuses this schema
