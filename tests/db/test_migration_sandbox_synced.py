"""Migration 0011: table ``sandbox_synced``, on a database with users from before it."""

from __future__ import annotations

from alembic import command
from sqlalchemy import create_engine, inspect, text

from memstrata.db.migrate import alembic_config, upgrade

from .conftest import ScratchFactory

ROOT = "a" * 64  # a provider identity as stored: its SHA-256 in hex (sandbox.synced.root_key)


def test_0011_adds_an_empty_notes_table_beside_existing_files(
    scratch_database: ScratchFactory,
) -> None:
    engine = create_engine(scratch_database("sandbox_synced_0011"))
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
            cfg = alembic_config(engine)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0010")
            conn.execute(  # a user of the release before: no note, the plain rule stays
                text(
                    "INSERT INTO user_memory (user_id, file_type, content, version)"
                    " VALUES ('u', 'memory_md', '# Memory', 4)"
                )
            )
        assert upgrade(engine) == "0011"
        with engine.begin() as conn:
            assert conn.execute(text("SELECT count(*) FROM sandbox_synced")).scalar_one() == 0
            for root in (ROOT, "b" * 64):  # one sandbox name under two roots: two rows
                conn.execute(
                    text(
                        "INSERT INTO sandbox_synced (user_id, root, sandbox, file_type, version)"
                        " VALUES ('u', :root, '', 'memory_md', 4)"
                    ),
                    {"root": root},
                )
            stamped = conn.execute(
                text("SELECT bool_and(updated_at IS NOT NULL) FROM sandbox_synced")
            )
            assert stamped.scalar_one()
        table = inspect(engine)
        key = table.get_pk_constraint("sandbox_synced")["constrained_columns"]
        assert key == ["user_id", "root", "sandbox", "file_type"]
        with engine.begin() as conn:
            cfg = alembic_config(engine)
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0010")
        assert "sandbox_synced" not in inspect(engine).get_table_names()
        with engine.connect() as conn:
            assert conn.execute(text("SELECT version FROM user_memory")).scalar_one() == 4
    finally:
        engine.dispose()
