"""Start-up and ``memstrata db status`` refuse a schema that records the head revision but
lacks objects it brings, as a failed restore leaves it (``tests/db/test_failed_restore.py``
makes one with ``pg_restore``; here the objects are dropped by hand).

Before, ``alembic_version`` was all that was read: with ``memory_embeddings`` gone, ``db
status`` said ``up_to_date`` and the server (``memstrata serve``, ``Memstrata.open``)
started with no search rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.schema_check import (
    SchemaObject,
    expected_objects,
    missing_objects,
    schema_gaps,
)
from memstrata.errors import DatabaseSetupError
from memstrata.runtime import Memstrata
from tests.cli.cli_env import clean_env, run_cli

from .conftest import ScratchFactory
from .read_only import login_role

GRANTS = [
    "SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public",
    "USAGE ON ALL SEQUENCES IN SCHEMA public",
]


def _settings(url: str, tmp_path: Path, *, migrate: bool) -> Settings:
    return Settings(
        environment="test", database_url=url, data_dir=tmp_path, migrate_on_start=migrate
    )


def _migrated_then(scratch: ScratchFactory, name: str, tmp_path: Path, *sql: str) -> str:
    """A scratch database migrated to head, then ``sql`` run on it as the superuser."""
    url = scratch(name)
    Database.open(_settings(url, tmp_path, migrate=True)).close()
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in sql:
                conn.exec_driver_sql(statement)
    finally:
        engine.dispose()
    return url


def _refusal(url: str, tmp_path: Path, *, migrate: bool) -> str:
    with pytest.raises(DatabaseSetupError) as caught:
        Database.open(_settings(url, tmp_path, migrate=migrate))
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_an_up_to_date_database_is_complete_for_its_owner_and_a_replica_role(
    database: Database,
) -> None:
    assert schema_gaps(database.engine) == []
    # A replica's role has no rights beyond its tables': the catalogs are enough.
    with login_role(database.engine, "memstrata_check_replica", GRANTS) as url:
        engine = create_engine(url)
        try:
            assert schema_gaps(engine) == []
        finally:
            engine.dispose()


@pytest.mark.parametrize("migrate", [False, True])
def test_a_missing_table_is_refused_at_start_naming_it_and_the_fix(
    scratch_database: ScratchFactory, tmp_path: Path, migrate: bool
) -> None:
    url = _migrated_then(
        scratch_database, f"incomplete_table_{migrate}", tmp_path, "DROP TABLE memory_embeddings"
    )
    message = _refusal(url, tmp_path, migrate=migrate)
    assert " is incomplete: it records revision 0011 but lacks table memory_embeddings — " in (
        message
    )
    assert "column" not in message  # the table stands for its columns and indexes
    assert "`memstrata db upgrade` cannot add them" in message
    assert "a superuser first ran `CREATE EXTENSION vector;`" in message


@pytest.mark.parametrize("migrate", [False, True])
def test_a_dropped_extension_is_refused_even_where_start_could_create_it(
    scratch_database: ScratchFactory, tmp_path: Path, migrate: bool
) -> None:
    # The superuser's start (migrate) used to create the extension again and run on a
    # memory_embeddings without its vector column.
    url = _migrated_then(
        scratch_database, f"incomplete_ext_{migrate}", tmp_path, "DROP EXTENSION vector CASCADE"
    )
    message = _refusal(url, tmp_path, migrate=migrate)
    assert (
        "lacks extension vector, column memory_embeddings.embedding, index "
        "ix_memory_embeddings_pending — " in message  # its WHERE names the column
    )


def test_a_replica_role_is_refused_a_dropped_index_in_one_line(
    scratch_database: ScratchFactory, tmp_path: Path
) -> None:
    url = _migrated_then(
        scratch_database, "incomplete_index", tmp_path, "DROP INDEX ix_memory_embeddings_model"
    )
    owner = create_engine(url)
    try:
        with login_role(owner, "memstrata_check_reader", GRANTS) as replica:
            message = _refusal(replica, tmp_path, migrate=False)
    finally:
        owner.dispose()
    assert "lacks index ix_memory_embeddings_model — " in message


@pytest.mark.parametrize("migrate", ["false", "true"])
def test_serve_and_the_library_refuse_it_in_one_line(
    scratch_database: ScratchFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    migrate: str,
) -> None:
    url = _migrated_then(
        scratch_database, f"serve_incomplete_{migrate}", tmp_path, "DROP TABLE memory_embeddings"
    )
    settings = _settings(url, tmp_path, migrate=migrate == "true")
    with pytest.raises(DatabaseSetupError, match=r"lacks table memory_embeddings — "):
        Memstrata.open(settings, embedder=None)

    clean_env(
        monkeypatch,
        tmp_path,
        {
            "MEMSTRATA_DATABASE_URL": url,
            "MEMSTRATA_DATA_DIR": str(tmp_path / "data"),
            "MEMSTRATA_MIGRATE_ON_START": migrate,
            "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
            "MEMSTRATA_PORT": "0",
        },
    )
    code, out, err = run_cli("serve")
    assert code == 1 and out == "" and "Traceback" not in err, err
    error = err.splitlines()[-1]  # after the log's "no embedding API" warning
    assert error.startswith("error: the schema on "), err
    assert " is incomplete: it records revision 0011 but lacks table memory_embeddings — " in (
        error
    )


def test_db_status_says_incomplete_and_exits_1(
    scratch_database: ScratchFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _migrated_then(
        scratch_database,
        "incomplete_status",
        tmp_path,
        "DROP TABLE memory_embeddings",
        "ALTER TABLE user_memory DROP COLUMN version",
    )
    clean_env(monkeypatch, tmp_path, {"MEMSTRATA_DATABASE_URL": url})
    code, out, err = run_cli("db", "status", "--json")
    assert code == 1, (out, err)
    status = json.loads(out)
    assert status["current"] == status["head"]
    assert status["up_to_date"] is False and status["complete"] is False
    assert status["missing"] == ["table memory_embeddings", "column user_memory.version"]
    assert err.startswith("error: the schema on ") and err.count("\n") == 1, err
    assert "lacks table memory_embeddings, column user_memory.version — " in err

    code, out, err = run_cli("db", "status")
    assert code == 1
    assert "complete    False" in out
    assert "run `memstrata db upgrade` to migrate" not in out


def test_db_status_of_a_complete_schema(
    database: Database, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clean_env(monkeypatch, tmp_path, {"MEMSTRATA_DATABASE_URL": pg_url})
    code, out, err = run_cli("db", "status", "--json")
    assert code == 0, err
    status = json.loads(out)
    assert status["up_to_date"] is True
    assert status["complete"] is True and status["missing"] == []


def test_the_expected_objects_come_from_the_models() -> None:
    expected = expected_objects()
    assert SchemaObject("extension", "", "vector") in expected
    assert SchemaObject("column", "memory_embeddings", "embedding_claimed_by") in expected
    assert SchemaObject("index", "user_memory", "uq_user_memory_user_file") in expected
    assert SchemaObject("primary key", "memory_index_state", "memory_index_state") in expected


def test_a_missing_table_hides_its_own_objects_only() -> None:
    expected = frozenset(
        {
            SchemaObject("table", "a", "a"),
            SchemaObject("column", "a", "x"),
            SchemaObject("index", "a", "ix_a"),
            SchemaObject("table", "b", "b"),
            SchemaObject("column", "b", "y"),
            SchemaObject("extension", "", "vector"),
        }
    )
    found = frozenset({SchemaObject("table", "b", "b")})
    assert [str(o) for o in missing_objects(expected, found)] == [
        "extension vector",
        "table a",
        "column b.y",
    ]
    assert missing_objects(expected, expected) == []
