"""``memory_embeddings.embedding_claimed_by``: which worker holds a re-embedding claim.

A claim used to be a lease alone (``embedding_claimed_until``, two minutes): the rows a
worker held when its process was killed waited out the lease before any other worker,
the restarted process included, took them. The column records the claiming worker's
token, the key of an advisory lock that worker holds on a connection of its own
(``retrieval.claimer``); PostgreSQL drops the lock when that connection ends, so another
worker finds the rows of a dead claimer with one look at ``pg_locks`` and takes them at
once. NULL: no claim, or a claim that relies on its lease (a release before this one, a
worker that could not take its lock). The lease stays the fallback.

- a partial index over the claimed rows: finding the claimers is a look at a few dozen
  rows (each worker's current batch), not a scan of the table.

Adding a nullable column without a default does not rewrite the table; the index build
reads it once, in the migration's transaction like every migration here.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("memory_embeddings", sa.Column("embedding_claimed_by", sa.Integer, nullable=True))
    op.create_index(
        "ix_memory_embeddings_claimed",
        "memory_embeddings",
        ["embedding_claimed_by"],
        postgresql_where=sa.text("embedding_claimed_by IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_memory_embeddings_claimed", table_name="memory_embeddings")
    op.drop_column("memory_embeddings", "embedding_claimed_by")
