"""Alembic environment: always runs on the connection/engine memstrata hands it."""

from __future__ import annotations

from alembic import context

from memstrata.db.models import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    engine = config.attributes["engine"]
    with engine.begin() as conn:
        context.configure(connection=conn, target_metadata=Base.metadata)
        context.run_migrations()
else:
    context.configure(connection=connection, target_metadata=Base.metadata)
    context.run_migrations()
