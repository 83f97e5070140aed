"""``embedding_models``: the embedding models the running re-embedding workers use.

Every replica's re-embedding worker re-embeds rows holding another model's vector. While
a rolling deploy changes the model, replicas of both models run at once, and each kept
re-embedding the rows the other had just done — the whole table, over and over, each
pass also invalidating every user's search index. Each worker now records its model here
on every round (``seen_at``); the vectors move to the live model that appeared last
(``first_seen``: set when a model is first seen, or seen again after being gone), and
workers of any other model embed only rows that have no vector at all. An old replica
restarting mid-rollout does not make its model new again (it was never gone); a model
whose replicas are all gone stops counting after a few minutes, so a rollback or a
scaled-down rollout hands the vectors back by itself.

No user data: on Citus a reference table (docs/SCALING.md).

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
        "embedding_models",
        sa.Column("model", sa.Text, primary_key=True),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("embedding_models")
