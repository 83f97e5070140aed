"""``memory_index_state.removals``: how many of the user's rows were ever deleted.

Bumped with the generation in the transaction that deletes rows
(``EmbeddingRepository.delete_ids``). A cache whose index is current up to a generation
learns from this one number whether the rows since then were only added — then it loads
the rows with larger ids and nothing else — instead of counting the user's rows after
every write (a third of the refresh after a new turn at 10k rows, docs/BENCHMARKS.md).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "memory_index_state",
        sa.Column("removals", sa.BigInteger, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_column("memory_index_state", "removals")
