"""Migration 0010: ``embedding_claimed_by`` and its partial index, on a table with rows."""

from __future__ import annotations

from alembic import command
from sqlalchemy import create_engine, inspect, text

from memstrata.db.migrate import alembic_config, upgrade

from .conftest import ScratchFactory


def test_0010_adds_the_claimer_column_to_rows_claimed_before_it(
    scratch_database: ScratchFactory,
) -> None:
    engine = create_engine(scratch_database("claimer_0010"))
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
            cfg = alembic_config(engine)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0009")
            conn.execute(  # a row an earlier release's worker holds on its lease
                text(
                    "INSERT INTO memory_embeddings (user_id, file_path, chunk_index,"
                    " chunk_text, embedding_claimed_until)"
                    " VALUES ('u', 'sessions/s/0', 0, 'text', now() + interval '2 minutes')"
                )
            )
        assert upgrade(engine) == "0011"  # to head, past 0010
        with engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT embedding_claimed_by, embedding_claimed_until > now() AS leased"
                    " FROM memory_embeddings"
                )
            ).one()
        assert row.embedding_claimed_by is None and row.leased  # the lease still holds it
        indexes = {i["name"]: i for i in inspect(engine).get_indexes("memory_embeddings")}
        claimed = indexes["ix_memory_embeddings_claimed"]
        assert claimed["column_names"] == ["embedding_claimed_by"]
        where = claimed.get("dialect_options", {}).get("postgresql_where")
        assert "embedding_claimed_by IS NOT NULL" in str(where)
        with engine.begin() as conn:
            cfg = alembic_config(engine)
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0009")
        columns = {c["name"] for c in inspect(engine).get_columns("memory_embeddings")}
        assert "embedding_claimed_by" not in columns
    finally:
        engine.dispose()
