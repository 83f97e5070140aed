"""``memory_index_state.removals`` and ``counted_writes``: deletions a cache can trust.

``removals`` counts the user's rows deleted by writers that count them
(``EmbeddingRepository.delete_ids``); ``counted_writes`` counts the generation bumps made
by such writers (``bump_generation``). When every bump since a cache's index was current
was a counted one, an unchanged ``removals`` proves the rows since then were only added, so
the refresh reads just the rows with larger ids instead of counting the user's rows after
every write (a third of the refresh after a new turn at 10k rows, docs/BENCHMARKS.md).
A writer that bumps the generation alone — a replica of an earlier release during a
rolling upgrade, a maintenance script — leaves ``counted_writes`` behind, and caches fall
back to counting: neither can make a cache miss a deletion.

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
    for name in ("removals", "counted_writes"):
        op.add_column(
            "memory_index_state",
            sa.Column(name, sa.BigInteger, nullable=False, server_default="0"),
        )


def downgrade() -> None:
    for name in ("counted_writes", "removals"):
        op.drop_column("memory_index_state", name)
