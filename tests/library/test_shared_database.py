"""A ``database=`` given to ``Memstrata.open`` is the caller's: closing one runtime leaves
it open for the others that share it — an embedded server included, which closing the
first runtime used to stop under the second."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.runtime import Memstrata


@pytest.mark.timeout(180)
def test_closing_one_runtime_leaves_a_shared_embedded_database_to_the_other(
    tmp_path: Path,
) -> None:
    settings = Settings(environment="test", data_dir=tmp_path / "data", database_url=None)
    db = Database.open(settings)
    try:
        first = Memstrata.open(settings, database=db, embedder=None)
        second = Memstrata.open(settings, database=db, embedder=None)
        first.store.provision_default_files("shared-db-user")
        first.close()
        # The second runtime still reads and writes through the same embedded server.
        assert second.store.get_memory_file("shared-db-user", "user") is not None
        assert second.list_users()[0].user_id == "shared-db-user"
        second.close()
        assert db.embedded is not None  # still the caller's to close
    finally:
        db.close()
    # A runtime that opened its own database closes it.
    own = Memstrata.open(settings, embedder=None)
    embedded = own.db.embedded
    own.close()
    assert own.db.embedded is None and embedded is not None
