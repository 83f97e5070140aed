"""Start-up refuses, in one line naming the fix, a database it could read but not write.

A role with SELECT only, one whose grants lack a table's DELETE or a sequence's USAGE, a
role whose transactions are read-only and a real hot standby each started, reported ready
and answered every write with a 500 (review M4). ``check_ready`` (replicas) and
``ensure_ready`` (``MEMSTRATA_MIGRATE_ON_START``) both check.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.errors import DatabaseSetupError
from tests.cli.cli_env import clean_env, run_cli

from .read_only import hot_standby, login_role

TABLES = "ALL TABLES IN SCHEMA public"
SEQUENCES = "ALL SEQUENCES IN SCHEMA public"


def _open(url: str, tmp_path: Path, *, migrate: bool) -> Database:
    settings = Settings(
        environment="test", database_url=url, data_dir=tmp_path, migrate_on_start=migrate
    )
    return Database.open(settings)


@pytest.fixture
def select_only(database: Database) -> Iterator[str]:
    with login_role(database.engine, "memstrata_select_only", [f"SELECT ON {TABLES}"]) as url:
        yield url


@pytest.mark.parametrize("migrate", [False, True])
def test_a_role_that_can_only_read_is_refused_naming_the_grant(
    select_only: str, tmp_path: Path, migrate: bool
) -> None:
    with pytest.raises(DatabaseSetupError) as caught:
        _open(select_only, tmp_path, migrate=migrate)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("role memstrata_select_only cannot write memstrata's tables")
    assert "INSERT, UPDATE, DELETE on embedding_models, memory_embeddings, " in message
    assert "; USAGE on memory_embeddings_id_seq, user_memory_id_seq, user_skill_" in message
    assert (
        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "
        "memstrata_select_only; GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO "
        "memstrata_select_only" in message
    )


def test_a_single_missing_right_is_named(database: Database, tmp_path: Path) -> None:
    grants = [
        f"SELECT, INSERT, UPDATE, DELETE ON {TABLES}",
        f"USAGE ON {SEQUENCES}",
    ]
    with login_role(database.engine, "memstrata_almost", grants) as url:
        with database.engine.begin() as conn:
            conn.exec_driver_sql("REVOKE DELETE ON memory_index_snapshots FROM memstrata_almost")
        with pytest.raises(DatabaseSetupError, match=r"\(no DELETE on memory_index_snapshots\)"):
            _open(url, tmp_path, migrate=False)
        with database.engine.begin() as conn:
            conn.exec_driver_sql("GRANT DELETE ON memory_index_snapshots TO memstrata_almost")
        _open(url, tmp_path, migrate=False).close()  # every right: it starts


def test_a_role_whose_transactions_are_read_only_is_refused(
    database: Database, tmp_path: Path
) -> None:
    grants = [f"ALL ON {TABLES}", f"ALL ON {SEQUENCES}"]
    option = "SET default_transaction_read_only = on"
    with (
        login_role(database.engine, "memstrata_ro_default", grants, option) as url,
        pytest.raises(DatabaseSetupError) as caught,
    ):
        _open(url, tmp_path, migrate=False)
    assert str(caught.value).startswith("transactions of role memstrata_ro_default on ")
    assert "ALTER ROLE memstrata_ro_default SET default_transaction_read_only = off" in str(
        caught.value
    )


def test_a_hot_standby_is_refused_and_serve_says_so_in_one_line(
    database: Database, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with hot_standby(pg_url) as standby:
        for migrate in (False, True):  # before migrating: that failed with a DDL error
            with pytest.raises(DatabaseSetupError, match=r"is a hot standby \(pg_is_in_"):
                _open(standby, tmp_path, migrate=migrate)
        clean_env(
            monkeypatch,
            tmp_path,
            {
                "MEMSTRATA_DATABASE_URL": standby,
                "MEMSTRATA_DATA_DIR": str(tmp_path / "data"),
                "MEMSTRATA_MIGRATE_ON_START": "false",
                "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
                "MEMSTRATA_PORT": "0",
            },
        )
        code, out, err = run_cli("serve")
    assert code == 1 and out == "" and "Traceback" not in err, err
    error = err.splitlines()[-1]  # after the log's "no embedding API" warning
    assert error.startswith("error: "), err
    assert "is a hot standby (pg_is_in_recovery() is true), which refuses every write: " in error
    assert error.endswith("point MEMSTRATA_DATABASE_URL at the primary")


def test_the_owner_and_a_fully_granted_role_start(database: Database, tmp_path: Path) -> None:
    url = database.engine.url.render_as_string(hide_password=False)
    _open(url, tmp_path, migrate=False).close()
    grants = [f"SELECT, INSERT, UPDATE, DELETE ON {TABLES}", f"USAGE ON {SEQUENCES}"]
    with login_role(database.engine, "memstrata_writer", grants) as writer:
        _open(writer, tmp_path, migrate=False).close()
