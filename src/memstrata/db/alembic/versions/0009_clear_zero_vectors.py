"""Clear the all-zero vectors stored before they were refused, so the healer embeds them.

Until the embedding client refused them (docs/RELIABILITY.md), an API that answered with
all-zero vectors had them stored. A zero vector has no direction: search leaves it out,
and because the row has a vector the healer never embeds it again, so such a row stayed
BM25-only for good. Setting it to NULL puts it in the healer's queue like any row whose
embedding failed; the next write of its vector bumps the user's index generation.

One pass over the rows that hold a vector. Nothing to undo: a NULL vector is what the
current release stores for an unusable answer.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        sa.text(
            "UPDATE memory_embeddings SET embedding = NULL, embedding_model = NULL,"
            " embedding_dim = NULL, embedding_claimed_until = NULL"
            " WHERE embedding IS NOT NULL AND vector_norm(embedding) = 0"
        )
    )


def downgrade() -> None:
    pass  # the zeros were unusable; there is nothing to restore
