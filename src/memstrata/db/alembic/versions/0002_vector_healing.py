"""Self-healing vectors: the re-embedding queue lives in ``memory_embeddings`` itself.

- ``inserted_at``: when the row was written (``created_at`` is the content's time and can
  be old), so the age of the oldest pending row is measurable.
- ``embedding_error``: why a text can never be embedded (the API rejected it, or it failed
  too often while the API worked); such rows are not retried.
- ``embedding_attempts``: failed attempts so far.
- ``embedding_claimed_until``: a worker's lease on the row, taken with
  ``FOR UPDATE SKIP LOCKED`` so replicas share the work and none does it twice.
- a partial index over rows without a vector: the queue's scan.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "memory_embeddings",
        sa.Column(
            "inserted_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
    )
    op.add_column("memory_embeddings", sa.Column("embedding_error", sa.Text, nullable=True))
    op.add_column(
        "memory_embeddings",
        sa.Column("embedding_attempts", sa.Integer, nullable=False, server_default="0"),
    )
    op.add_column(
        "memory_embeddings",
        sa.Column("embedding_claimed_until", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index(
        "ix_memory_embeddings_pending",
        "memory_embeddings",
        ["id"],
        postgresql_where=sa.text("embedding IS NULL AND embedding_error IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_memory_embeddings_pending", table_name="memory_embeddings")
    for column in ("embedding_claimed_until", "embedding_attempts", "embedding_error"):
        op.drop_column("memory_embeddings", column)
    op.drop_column("memory_embeddings", "inserted_at")
