"""``memory_template_paragraphs``: every template paragraph a deployment has provisioned.

Paragraphs of USER.md / MEMORY.md that are still exactly their template's are not indexed
(retrieval.scaffold). Compared with the current template only, a platform that edits its
templates would see its older users' untouched paragraphs of the old template indexed as
resident content at their next write. Each process records the paragraphs of the
templates it provisions from, and the comparison is with all of them.

No user data: on Citus a reference table (docs/SCALING.md).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memory_template_paragraphs",
        sa.Column("file_type", sa.String(20), primary_key=True),
        sa.Column("paragraph_hash", sa.String(64), primary_key=True),
        sa.Column("paragraph", sa.Text, nullable=False),
        sa.Column(
            "recorded_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.func.now(),
        ),
    )


def downgrade() -> None:
    op.drop_table("memory_template_paragraphs")
