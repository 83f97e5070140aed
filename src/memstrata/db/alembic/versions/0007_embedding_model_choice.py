"""``embedding_model_choice``: the embedding model the stored vectors are moving to.

Every replica's re-embedding worker re-embeds rows holding another model's vector. While
a rolling deploy changes the model, replicas of both models run at once, and each kept
re-embedding the rows the other had just done — the whole table, over and over, each
pass also invalidating every user's search index. The worker of the replica that started
last records its model here; a worker whose model is not the recorded one embeds only
rows that have no vector at all and leaves the others to the recorded model's replicas.
A rollback starts replicas of the old model, which record it again.

One row (``id`` = 1), no user data: on Citus a reference table (docs/SCALING.md).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "embedding_model_choice",
        sa.Column("id", sa.SmallInteger, primary_key=True, server_default="1"),
        sa.Column("model", sa.Text, nullable=False),
        sa.Column(
            "chosen_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
        sa.CheckConstraint("id = 1", name="ck_embedding_model_choice_one_row"),
    )


def downgrade() -> None:
    op.drop_table("embedding_model_choice")
