"""Per-user search index snapshots (``retrieval/snapshot.py``): derived data, safe to drop.

UNLOGGED: a snapshot is rebuilt from the rows whenever it is missing, so it need not pay
for write-ahead logging (a 10k-row user's is ~19 MB); after a database crash PostgreSQL
empties the table and cold loads read the rows until new snapshots are written. The
payload is stored uncompressed (STORAGE EXTERNAL): it is mostly float32 vectors, which pglz
barely shrinks, and decompressing it would cost every cold load.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memory_index_snapshots",
        sa.Column("user_id", sa.String(100), primary_key=True),
        sa.Column("model", sa.Text, primary_key=True),
        sa.Column("format", sa.Text, nullable=False),
        sa.Column("max_id", sa.BigInteger, nullable=False),
        sa.Column("row_count", sa.Integer, nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        prefixes=["UNLOGGED"],
    )
    op.execute("ALTER TABLE memory_index_snapshots ALTER COLUMN payload SET STORAGE EXTERNAL")


def downgrade() -> None:
    op.drop_table("memory_index_snapshots")
