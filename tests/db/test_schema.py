"""The migrated schema is exactly the spec's data model (plus the documented additions)."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import DataError, StatementError

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.migrate import current_revision, head_revision, upgrade


def columns(engine: Engine, table: str) -> dict[str, dict[str, object]]:
    return {c["name"]: c for c in inspect(engine).get_columns(table)}


def test_user_memory_columns(db: Database) -> None:
    cols = columns(db.engine, "user_memory")
    assert list(cols) == ["id", "user_id", "file_type", "content", "version", "updated_at"]
    assert str(cols["user_id"]["type"]) == "VARCHAR(100)"
    assert str(cols["file_type"]["type"]) == "VARCHAR(20)"
    assert str(cols["content"]["type"]) == "TEXT"
    assert cols["version"]["default"] == "1"
    assert all(not cols[c]["nullable"] for c in ("user_id", "file_type", "content", "version"))


def test_memory_embeddings_vector_is_2560(db: Database) -> None:
    cols = columns(db.engine, "memory_embeddings")
    assert list(cols)[:7] == [
        "id",
        "user_id",
        "file_path",
        "chunk_index",
        "chunk_text",
        "embedding",
        "created_at",
    ]
    assert str(cols["file_path"]["type"]) == "VARCHAR(255)"
    assert cols["file_path"]["nullable"] and cols["chunk_index"]["nullable"]
    assert cols["embedding"]["nullable"]
    with db.engine.connect() as conn:
        typ = conn.execute(
            text(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                "WHERE attrelid = 'memory_embeddings'::regclass AND attname = 'embedding'"
            )
        ).scalar()
    assert typ == "vector(2560)"


def test_user_skill_configs_defaults(db: Database) -> None:
    with db.engine.begin() as conn:
        conn.execute(text("INSERT INTO user_skill_configs (user_id, skill_name) VALUES ('u', 's')"))
        row = conn.execute(text("SELECT enabled, updated_at FROM user_skill_configs")).one()
    assert row.enabled is True
    assert row.updated_at is not None


def test_indexes_and_unique_constraints(db: Database) -> None:
    insp = inspect(db.engine)
    for table in ("user_memory", "memory_embeddings", "user_skill_configs"):
        indexed = {tuple(i["column_names"]) for i in insp.get_indexes(table)}
        assert ("user_id",) in indexed, table
    uniques = {tuple(u["column_names"]) for u in insp.get_unique_constraints("user_memory")}
    assert ("user_id", "file_type") in uniques
    uniques = {tuple(u["column_names"]) for u in insp.get_unique_constraints("user_skill_configs")}
    assert ("user_id", "skill_name") in uniques
    with db.engine.begin() as conn, pytest.raises(Exception, match="uq_user_memory_user_file"):
        conn.execute(
            text(
                "INSERT INTO user_memory (user_id, file_type, content) "
                "VALUES ('u','user_md','a'), ('u','user_md','b')"
            )
        )


def test_vector_column_rejects_wrong_dimension_in_sql(db: Database) -> None:
    with db.engine.begin() as conn, pytest.raises((DataError, StatementError)):
        conn.execute(
            text(
                "INSERT INTO memory_embeddings (user_id, chunk_text, embedding) "
                "VALUES ('u', 't', '[1,2,3]')"
            )
        )


def test_upgrade_is_idempotent(db: Database) -> None:
    assert upgrade(db.engine) == head_revision(db.engine) == current_revision(db.engine)


def test_reopen_same_database_is_ready(settings: Settings) -> None:
    again = Database.open(settings)
    try:
        assert current_revision(again.engine) == head_revision(again.engine)
    finally:
        again.close()
