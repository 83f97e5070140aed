"""What the erase tests share: a runtime on the test database (``mem``, a fixture through
``tests/memory/conftest.py``; ``open_runtime`` opens more, each like another process), and
a count of a user's rows in every table an erase empties."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.runtime import Memstrata

TABLES = (
    "user_memory",
    "memory_embeddings",
    "memory_index_snapshots",
    "user_skill_configs",
    "memory_index_state",
    "sandbox_synced",
)


def counts(db: Database, user_id: str) -> dict[str, int]:
    with db.engine.connect() as conn:
        return {
            table: int(
                conn.execute(
                    text(f"SELECT count(*) FROM {table} WHERE user_id = :u"), {"u": user_id}
                ).scalar_one()
            )
            for table in TABLES
        }


@pytest.fixture
def mem(open_runtime: Callable[[], Memstrata]) -> Memstrata:
    return open_runtime()
