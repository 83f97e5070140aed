"""A closed runtime refuses new database sessions; its database, and other runtimes on it,
do not notice."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import text

from memstrata.db.database import ClosableSessions, Database
from memstrata.errors import RuntimeClosedError
from memstrata.runtime import Memstrata


def test_closable_sessions_keep_the_factorys_options_until_closed(db: Database) -> None:
    sessions = ClosableSessions(db.sessions, "closed: open a new one")
    assert sessions.kw == db.sessions.kw and sessions.class_ is db.sessions.class_
    with sessions() as session:
        assert session.bind is db.engine and not session.expire_on_commit
        sessions.close()
        assert session.execute(text("SELECT 1")).scalar_one() == 1  # open ones go on
    with pytest.raises(RuntimeClosedError, match="closed: open a new one"):
        sessions()
    with pytest.raises(RuntimeClosedError):
        sessions.begin()


def test_closing_one_runtime_leaves_the_database_and_the_others(
    open_runtime: Callable[..., Memstrata],
) -> None:
    first, second = open_runtime(), open_runtime()
    first.close()
    with pytest.raises(RuntimeClosedError):
        first.store.get_memory_file("u", "user")
    second.store.upsert_memory_file("u", "user", "- Name: Ada\n")
    stored = second.store.get_memory_file("u", "user")
    assert stored is not None and stored.version == 1
