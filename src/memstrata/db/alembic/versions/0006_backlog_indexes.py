"""Indexes that let the healing backlog be counted without reading the whole table.

``/readyz``, ``/metrics`` and every claim of the re-embedding queue ask which rows lack a
vector for the current model. The rows without any vector already had a partial index
(0002); rows holding another model's vector (or none recorded) did not, so each of those
statements read every row of ``memory_embeddings`` — about a second per probe at two
million rows, Kubernetes' default probe timeout.

- ``ix_memory_embeddings_model``: ``embedding_model`` of the rows not given up on, so
  "another model" is two index ranges (retrieval.queue spells it that way).
- ``ix_memory_embeddings_failed``: the rows given up on, for the failure count.

Both are small in steady state (the first holds one short string per row, the second
only failed rows). Built in the migration's transaction, like every migration here: the
build blocks writes to the table while it runs (measured in docs/DEPLOY.md).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_memory_embeddings_model",
        "memory_embeddings",
        ["embedding_model"],
        postgresql_where=sa.text("embedding_error IS NULL"),
    )
    op.create_index(
        "ix_memory_embeddings_failed",
        "memory_embeddings",
        ["id"],
        postgresql_where=sa.text("embedding_error IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_memory_embeddings_failed", table_name="memory_embeddings")
    op.drop_index("ix_memory_embeddings_model", table_name="memory_embeddings")
