"""Initial schema: the spec's three tables plus the index-generation table.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import Vector
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")
    op.create_table(
        "user_memory",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("user_id", sa.String(100), nullable=False),
        sa.Column("file_type", sa.String(20), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False, server_default="1"),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.UniqueConstraint("user_id", "file_type", name="uq_user_memory_user_file"),
    )
    op.create_index("ix_user_memory_user_id", "user_memory", ["user_id"])

    op.create_table(
        "memory_embeddings",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("user_id", sa.String(100), nullable=False),
        sa.Column("file_path", sa.String(255), nullable=True),
        sa.Column("chunk_index", sa.Integer, nullable=True),
        sa.Column("chunk_text", sa.Text, nullable=False),
        sa.Column("embedding", Vector(2560), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.Column("content_hash", sa.String(64), nullable=False, server_default=""),
        sa.Column("embedding_model", sa.String(200), nullable=True),
        sa.Column("embedding_dim", sa.Integer, nullable=True),
        sa.Column("source_ids", JSONB, nullable=True),
        sa.Column("context", JSONB, nullable=True),
    )
    op.create_index("ix_memory_embeddings_user_id", "memory_embeddings", ["user_id"])
    # (user_id, id): "rows added since id X" and per-user counts for the search cache.
    op.create_index("ix_memory_embeddings_user_id_id", "memory_embeddings", ["user_id", "id"])
    op.create_index(
        "uq_memory_embeddings_user_path_chunk",
        "memory_embeddings",
        ["user_id", "file_path", "chunk_index"],
        unique=True,
    )

    op.create_table(
        "user_skill_configs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("user_id", sa.String(100), nullable=False),
        sa.Column("skill_name", sa.String(100), nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.UniqueConstraint("user_id", "skill_name", name="uq_user_skill_configs_user_skill"),
    )
    op.create_index("ix_user_skill_configs_user_id", "user_skill_configs", ["user_id"])

    op.create_table(
        "memory_index_state",
        sa.Column("user_id", sa.String(100), primary_key=True),
        sa.Column("generation", sa.BigInteger, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_table("memory_index_state")
    op.drop_table("user_skill_configs")
    op.drop_table("memory_embeddings")
    op.drop_table("user_memory")
