"""The two set-up steps of docs/DEPLOY.md that an operator can get wrong on an external
PostgreSQL, each refused in one line naming the fix, as the doc promises.

- A replica role with no grants at all (the state right after ``memstrata db upgrade``,
  before the GRANT step) failed on reading ``alembic_version`` with a 245-line traceback,
  where a role with some grants got the one-line ``cannot write memstrata's tables``.
- ``memstrata db upgrade`` run by a role that is not a superuser said "install pgvector on
  that server" when pgvector was installed: it is not a trusted extension, so only a
  superuser may create it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.migrate import upgrade
from memstrata.errors import DatabaseSetupError, PgvectorMissingError

from .conftest import ScratchFactory
from .read_only import login_role


@pytest.mark.parametrize("migrate", [False, True])
def test_a_role_without_any_grant_is_refused_naming_the_grant(
    database: Database, tmp_path: Path, migrate: bool
) -> None:
    with login_role(database.engine, "memstrata_no_grants", []) as url:
        settings = Settings(
            environment="test", database_url=url, data_dir=tmp_path, migrate_on_start=migrate
        )
        with pytest.raises(DatabaseSetupError) as caught:
            Database.open(settings)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("role memstrata_no_grants cannot write memstrata's tables")
    assert "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO " in message


def test_creating_pgvector_without_superuser_says_who_must_create_it(
    scratch_database: ScratchFactory,
) -> None:
    admin = create_engine(scratch_database("memstrata_no_superuser"))
    try:
        with login_role(admin, "memstrata_not_super", []) as url:
            engine = create_engine(url)
            try:
                with pytest.raises(PgvectorMissingError) as caught:
                    upgrade(engine)
            finally:
                engine.dispose()
    finally:
        admin.dispose()
    message = str(caught.value)
    assert "\n" not in message
    assert "install pgvector" not in message
    assert "role memstrata_not_super may not create the pgvector extension" in message
    assert "have a superuser run `CREATE EXTENSION vector;` in database " in message
    assert message.endswith("then run `memstrata db upgrade` again")
