"""Table ``sandbox_synced``: the DB version memstrata last left each sandbox file at.

A read-back without a base record it can trust (the agent removed or garbled
``.memstrata/base``) writes the agent's copy only over the version memstrata last left the
file at, and keeps it aside over a newer one (``sandbox.rule.decide``'s ``pushed``). That
version was kept in the memory of the process that pushed it: the read-back in another
process (the agent host's library after a push by ``memstrata serve``) or after a restart
knew none and wrote the copy over a person's newer edit. The table makes it shared.

One row per (user, root, sandbox, file): ``root`` is the SHA-256 (hex) of the sandbox
provider's identity (the local provider's root path), since replicas on one database may
each have a sandbox root of their own and must not read each other's notes; ``sandbox`` is
"" for the user's own sandbox, else the session sandbox's directory name. A new, empty
table: no rewrite of anything; a sandbox with no row keeps the plain sandbox-first rule,
as before this migration.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sandbox_synced",
        sa.Column("user_id", sa.String(100), primary_key=True),
        sa.Column("root", sa.String(64), primary_key=True),
        sa.Column("sandbox", sa.String(200), primary_key=True),
        sa.Column("file_type", sa.String(20), primary_key=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
    )


def downgrade() -> None:
    op.drop_table("sandbox_synced")
