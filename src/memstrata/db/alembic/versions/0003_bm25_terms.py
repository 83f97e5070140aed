"""BM25 terms stored with each row (``retrieval/terms.py``), so a cold index load does not
re-tokenise. Nullable: rows written before it are tokenised at load, as before.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("memory_embeddings", sa.Column("bm25_terms", sa.Text, nullable=True))


def downgrade() -> None:
    op.drop_column("memory_embeddings", "bm25_terms")
