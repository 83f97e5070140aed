"""Migration 0009: all-zero vectors stored by an earlier release go back to the healer."""

from __future__ import annotations

from alembic import command
from sqlalchemy import create_engine, text

from memstrata.config_embedding import STORED_VECTOR_DIM
from memstrata.db.migrate import alembic_config, upgrade

from .conftest import ScratchFactory


def _vector(first: float) -> str:
    return "[" + ",".join([str(first)] + ["0"] * (STORED_VECTOR_DIM - 1)) + "]"


def test_zero_vectors_stored_before_0009_are_cleared_and_others_kept(
    scratch_database: ScratchFactory,
) -> None:
    engine = create_engine(scratch_database("zero_vectors_0009"))
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
            cfg = alembic_config(engine)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0008")
            for path, first in (("zero", 0.0), ("good", 0.5)):
                conn.execute(
                    text(
                        "INSERT INTO memory_embeddings (user_id, file_path, chunk_index,"
                        " chunk_text, embedding, embedding_model, embedding_dim)"
                        " VALUES ('u', :path, 0, 'text', CAST(:v AS vector), 'm', 384)"
                    ),
                    {"path": path, "v": _vector(first)},
                )
        upgrade(engine)
        with engine.connect() as conn:
            rows = {
                r.file_path: r
                for r in conn.execute(
                    text(
                        "SELECT file_path, embedding IS NULL AS missing, embedding_model,"
                        " embedding_dim FROM memory_embeddings"
                    )
                )
            }
        assert rows["zero"].missing and rows["zero"].embedding_model is None
        assert rows["zero"].embedding_dim is None
        assert not rows["good"].missing
        assert (rows["good"].embedding_model, rows["good"].embedding_dim) == ("m", 384)
    finally:
        engine.dispose()
