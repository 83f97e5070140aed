"""A database whose server has pgvector but where it was never created: the start-up
refusal says who can create it. ``memstrata db upgrade`` alone, run by a role that is no
superuser (the usual migration role), only stopped at a second refusal."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine

from memstrata.db.engine import check_pgvector
from memstrata.errors import PgvectorMissingError
from tests.db.conftest import ScratchFactory


def test_an_extension_not_created_names_a_superuser(scratch_database: ScratchFactory) -> None:
    engine = create_engine(scratch_database("memstrata_vector_not_created"))
    try:
        with pytest.raises(PgvectorMissingError) as caught:
            check_pgvector(engine)
    finally:
        engine.dispose()
    message = str(caught.value)
    assert message.startswith("the pgvector extension is available but not created on ")
    assert message.endswith(
        "; have a superuser run `CREATE EXTENSION vector;` in database "
        "memstrata_vector_not_created (or run `memstrata db upgrade` as one)"
    )
