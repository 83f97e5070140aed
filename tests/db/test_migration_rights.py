"""Two ways a migration meets another party on an external PostgreSQL, each told as it is:
a role that may use memstrata's tables but not change them (a replicas' role with
MEMSTRATA_MIGRATE_ON_START on) is refused with the fix, not with PostgreSQL's bare "must
be owner of table …"; and the loser of two processes migrating at once says it found the
schema upgraded, not ``db.upgraded`` for a migration it never ran.

A schema one revision behind this release's, on a scratch database of the session's server.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, text

from memstrata.db import migrate
from memstrata.db.migrate import alembic_config, current_revision, schema_head, upgrade
from memstrata.errors import DatabaseSetupError
from memstrata.logs import event_fields

from .conftest import ScratchFactory
from .read_only import login_role

pytestmark = pytest.mark.timeout(120)

GRANTS = [
    "SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public",
    "USAGE ON ALL SEQUENCES IN SCHEMA public",
]


def _previous() -> str:
    head = ScriptDirectory.from_config(alembic_config(None)).get_revision(schema_head())
    assert head is not None and isinstance(head.down_revision, str)
    return head.down_revision


@pytest.fixture
def behind(scratch_database: ScratchFactory) -> Iterator[Engine]:
    """A database whose schema is one revision behind head, migrated by its owner."""
    engine = create_engine(scratch_database("memstrata_behind"))
    with engine.begin() as conn:
        conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
        cfg = alembic_config(engine)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, _previous())
    yield engine
    engine.dispose()


def test_a_role_that_may_not_change_the_schema_is_told_the_fix(behind: Engine) -> None:
    with login_role(behind, "memstrata_not_owner", GRANTS) as url:
        engine = create_engine(url)
        try:
            with pytest.raises(DatabaseSetupError) as caught:
                upgrade(engine)
        finally:
            engine.dispose()
    message = str(caught.value)
    # PostgreSQL's words depend on the migration: "must be owner of table …" for an ALTER,
    # "permission denied for schema public" for a CREATE.
    assert "must be owner of" in message or "permission denied for" in message
    assert message.endswith(
        "this role may not change the schema: run `memstrata db upgrade` once with "
        "MEMSTRATA_DATABASE_URL set to the URL of the role that owns the tables, then "
        "start again (replicas: set MEMSTRATA_MIGRATE_ON_START=false, docs/DEPLOY.md)"
    )


def test_the_loser_of_a_migration_race_says_it_found_the_schema_upgraded(
    behind: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger=migrate.logger.name)
    outcome: list[object] = []
    with behind.connect() as winner:
        with winner.begin():
            winner.execute(
                text("SELECT pg_advisory_xact_lock(:k)"), {"k": migrate._MIGRATION_LOCK_KEY}
            )
            loser = threading.Thread(target=lambda: outcome.append(upgrade(behind)))
            loser.start()
            loser.join(1.0)
            assert loser.is_alive()  # read the old revision, now waits for the lock
            cfg = alembic_config(behind)
            cfg.attributes["connection"] = winner
            command.upgrade(cfg, "head")
        loser.join(30)
    assert outcome == [schema_head()] == [current_revision(behind)]
    said = [f for f in map(event_fields, caplog.records) if f.get("event", "").startswith("db.")]
    assert [f["event"] for f in said] == ["db.already_upgraded"]
    assert said[0]["revision"] == schema_head()
