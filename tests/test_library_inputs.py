"""The library API (README, "Library use") refuses what it cannot do with memstrata's own
typed errors, before anything is read or written: calls on a closed runtime, bad session
ids, turn ids and turn indexes, unknown settings, arguments of the wrong type, and future
timestamps given without a time zone.

The error classes new with these checks are looked up in the tests (``errors.X``), not
imported at the top, so that each test fails on its own without them.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from memstrata import errors
from memstrata.api.errors import map_exception
from memstrata.config import Settings, unknown_variables
from memstrata.db.database import Database
from memstrata.db.integers import MAX_INT
from memstrata.errors import InvalidContentError, MemstrataError
from memstrata.retrieval.rounds import Round, RoundsInvalidError
from memstrata.runtime import CLOSED_MESSAGE, Memstrata
from memstrata.sandbox.reconcile import DB_ERRORS

USER = "lib-user"
README = Path(__file__).parents[1] / "README.md"
ROWS = "SELECT count(*) FROM memory_embeddings"


@pytest.fixture
def mem(open_runtime: Callable[..., Memstrata]) -> Memstrata:
    return open_runtime()


def _count(db: Database, sql: str) -> int:
    with db.engine.connect() as conn:
        return int(conn.execute(text(sql)).scalar_one())


# -- 1. a closed runtime ---------------------------------------------------------------------


def test_every_entry_point_of_a_closed_runtime_raises_runtime_closed(
    mem: Memstrata, db: Database
) -> None:
    """One typed error: not the driver's OperationalError naming the socket (the
    embedded server stopped), nor calls that still work (an external database, whose
    pool ``close()`` only disposed); no agent session on a runtime that will never save
    anything, and a tool of a session opened before the close says it could not save,
    never that it will save later."""
    session = asyncio.run(mem.open_agent_session(USER, token_limit=8000))
    mem.close()
    versions = "SELECT count(*) + coalesce(sum(version), 0) FROM user_memory"
    before = (_count(db, versions), _count(db, ROWS))

    calls = {
        "store.get_memory_file": lambda: mem.store.get_memory_file(USER, "memory"),
        "store.upsert_memory_file": lambda: mem.store.upsert_memory_file(USER, "user", "x\n"),
        "indexer.index_turn": lambda: mem.indexer.index_turn(USER, "s1", 0, "hello"),
        "search.search": lambda: mem.search.search(USER, "hello"),
        "import_rounds": lambda: mem.import_rounds(USER, [Round("s1", 0, "hello")]),
        "sync.frontend_edit": lambda: asyncio.run(mem.sync.frontend_edit(USER, "user", "x\n")),
        "open_agent_session": lambda: asyncio.run(mem.open_agent_session(USER, token_limit=8000)),
    }
    for name, call in calls.items():
        with pytest.raises(MemstrataError, match=re.escape("Memstrata.open(")) as info:
            call()
        assert "this Memstrata was closed" in str(info.value), name
        assert type(info.value) is errors.RuntimeClosedError, name
    # Not "the database is unreachable", which the tools answer with "saved later".
    assert not issubclass(errors.RuntimeClosedError, DB_ERRORS)

    answer = asyncio.run(session.tools.call("record_memory", {"content": "Likes tea"}))
    assert answer.failed, answer
    assert answer == "error: MEMORY.md was not saved: " + CLOSED_MESSAGE, answer
    found = asyncio.run(session.tools.call("memory_search", {"query": "tea"}))
    assert found.failed and found == "error: " + CLOSED_MESSAGE, found
    mapped = map_exception(errors.RuntimeClosedError(CLOSED_MESSAGE))
    assert mapped is not None and mapped.status_code == 503  # for a host's mounted router
    assert (_count(db, versions), _count(db, ROWS)) == before  # nothing was written
    mem.close()  # a second close does nothing
    with db.sessions() as s:  # the caller's database is still the caller's
        assert s.execute(text("SELECT 1")).scalar_one() == 1


# -- 2. session ids of agent sessions --------------------------------------------------------


@pytest.mark.parametrize("session_id", ["", "   ", 5, "a/b", "x" * 201])
def test_open_agent_session_refuses_a_bad_session_id_before_anything(
    mem: Memstrata, db: Database, session_id: object
) -> None:
    """No session on a broken sandbox, no id registered for frontend pushes, no user
    provisioned: the README's promise for arguments of the wrong type or range."""
    refused = "^(invalid session_id|session_id is empty|session_id must be a string)"
    with pytest.raises(InvalidContentError, match=refused):
        asyncio.run(
            mem.open_agent_session(USER, token_limit=8000, session_id=session_id)  # type: ignore[arg-type]
        )
    assert mem.sync.open_sessions(USER) == []
    assert _count(db, "SELECT count(*) FROM user_memory") == 0
    session = asyncio.run(mem.open_agent_session(USER, token_limit=8000, session_id="chat:1"))
    assert mem.sync.open_sessions(USER) == ["chat:1"]
    session.close()


# -- 3. source ids ---------------------------------------------------------------------------


def test_source_ids_must_be_a_list_of_strings(mem: Memstrata, db: Database) -> None:
    """A string was stored letter by letter, numbers and objects as their str()."""
    with pytest.raises(RoundsInvalidError, match="source_ids must be a list of strings"):
        mem.indexer.index_turn(USER, "s1", 0, "hello", source_ids="abc")
    bad = [
        Round("s1", 0, "hello", source_ids=[1, 2]),  # type: ignore[list-item]
        Round("s1", 1, "again", source_ids=[None, {"id": 1}]),  # type: ignore[list-item]
        Round("s1", 2, "fine", source_ids=["s1:2", "s0:9"]),
        Round("s1", 3, "NUL", source_ids=["a\x00b"]),
    ]
    with pytest.raises(RoundsInvalidError) as info:
        mem.import_rounds(USER, bad)
    assert [e["index"] for e in info.value.errors] == [0, 1, 3]
    assert all("source_ids" in e["error"] for e in info.value.errors)
    assert _count(db, ROWS) == 0  # all or nothing
    mem.import_rounds(USER, [bad[2]])
    (hit,) = mem.search.search(USER, "fine").hits
    assert hit.source_ids == ("s1:2", "s0:9")


# -- 4. turn indexes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "turn_index", [MAX_INT + 1, 2**63, 2**20000, -1], ids=["2^31", "2^63", "2^20000", "-1"]
)
def test_turn_index_is_bounded_like_rest_and_mcp(
    mem: Memstrata, db: Database, turn_index: int
) -> None:
    with pytest.raises(RoundsInvalidError, match=f"turn_index must be .*0 to {MAX_INT}"):
        mem.indexer.index_turn(USER, "s1", turn_index, "hello")
    with pytest.raises(RoundsInvalidError, match=str(MAX_INT)):
        mem.import_rounds(USER, [Round("s1", turn_index, "hello")])
    assert _count(db, ROWS) == 0
    (report,) = mem.import_rounds(USER, [Round("s1", MAX_INT, "the last one")])
    assert report.inserted == 1


# -- 5. settings -----------------------------------------------------------------------------


def test_unknown_settings_arguments_are_refused_and_variables_only_warned(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(MemstrataError, match="did you mean prompt_budget_ratio") as info:
        Settings(prompt_budget_raito=0.2)  # type: ignore[call-arg]
    assert type(info.value) is errors.UnknownSettingError
    with pytest.raises(errors.UnknownSettingError, match=r"'top_k'.*CONFIGURATION\.md"):
        Settings(top_k=3)  # type: ignore[call-arg]
    assert Settings(prompt_budget_ratio=0.2).prompt_budget_ratio == 0.2
    # The environment and a .env file keep their rules: unknown MEMSTRATA_* variables
    # are reported by unknown_variables (the config.unknown_variable warning), others
    # are none of memstrata's business.
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text(
        "MEMSTRATA_TOP_K=3\nOTHER_APP_SETTING=1\nMEMSTRATA_DECAY_FLOOR=0.25\n", encoding="utf-8"
    )
    monkeypatch.setenv("MEMSTRATA_PROMPT_BUDGET_RAITO", "0.2")
    from_env = Settings()
    assert from_env.decay_floor == 0.25
    assert from_env.prompt_budget_ratio == 0.15
    assert ("MEMSTRATA_PROMPT_BUDGET_RAITO", "MEMSTRATA_PROMPT_BUDGET_RATIO") in (
        unknown_variables({"MEMSTRATA_PROMPT_BUDGET_RAITO": "0.2"})
    )


# -- 6. arguments of the wrong type ----------------------------------------------------------


def test_wrong_arguments_are_invalid_content_errors(mem: Memstrata, db: Database) -> None:
    with pytest.raises(InvalidContentError, match="rounds must be a list"):
        mem.import_rounds(USER, None)  # type: ignore[arg-type]
    with pytest.raises(InvalidContentError, match="wrap a single round in a list"):
        mem.import_rounds(USER, Round("s1", 0, "hello"))  # type: ignore[arg-type]
    with pytest.raises(InvalidContentError, match="rounds must be a list"):
        mem.indexer.index_rounds(USER, "hello")  # type: ignore[arg-type]
    with pytest.raises(InvalidContentError, match="background must be True or False"):
        mem.import_rounds(USER, [Round("s1", 0, "hello")], background="no")  # type: ignore[arg-type]
    assert _count(db, ROWS) == 0
    for attempts in (0, -1, "3", True):
        with pytest.raises(InvalidContentError, match="attempts must be an integer"):
            mem.store.edit_memory_file(USER, "memory", str.upper, attempts=attempts)  # type: ignore[arg-type]
    assert mem.store.get_memory_file(USER, "memory") is None


# -- 7. naive timestamps ---------------------------------------------------------------------


def test_a_naive_future_timestamp_is_told_that_naive_times_are_utc(mem: Memstrata) -> None:
    ahead = datetime.now(UTC) + timedelta(hours=1)
    with pytest.raises(RoundsInvalidError, match="in the future") as naive:
        mem.indexer.index_turn(USER, "s1", 0, "hello", timestamp=ahead.replace(tzinfo=None))
    assert "without a time zone is read as UTC" in str(naive.value)
    assert "datetime.now(UTC)" in str(naive.value)
    with pytest.raises(RoundsInvalidError, match="in the future") as aware:
        mem.indexer.index_turn(USER, "s1", 0, "hello", timestamp=ahead)
    assert "time zone" not in str(aware.value)
    # A naive time in the past is still taken, as UTC.
    (report,) = mem.import_rounds(
        USER, [Round("s1", 1, "earlier", timestamp=datetime(2024, 5, 1, 12, 0))]
    )
    assert report.inserted == 1
    section = README.read_text(encoding="utf-8").split("## Library use", 1)[1].split("\n## ")[0]
    assert "read as UTC" in section


# -- 8. a future as_of -----------------------------------------------------------------------


def test_a_future_as_of_is_refused_as_a_future_timestamp_is(mem: Memstrata) -> None:
    """It searched every dated row as centuries old: each hit's score 0, no warning."""
    mem.indexer.index_turn(USER, "s1", 0, "kite flying")
    with pytest.raises(InvalidContentError, match=r"as_of .* is in the future") as future:
        mem.search.search(USER, "kite", as_of=datetime(2999, 1, 1, tzinfo=UTC))
    assert "allowed skew 300 s" in str(future.value)
    assert "leave as_of out" in str(future.value)
    with pytest.raises(InvalidContentError, match="without a time zone is read as UTC"):
        mem.search.search(
            USER, "kite", as_of=datetime.now(UTC).replace(tzinfo=None) + timedelta(hours=1)
        )
    near = datetime.now(UTC) + timedelta(seconds=30)
    assert mem.search.search(USER, "kite", as_of=near).hits[0].score > 0


# -- 9. user ids that look like another user's ----------------------------------------------


@pytest.mark.parametrize("user", ["bob\n", " bob", "bob\t", "b\x1bob", "b\x9bob", "b\u2029ob"])
def test_a_user_id_with_whitespace_or_controls_is_refused_everywhere(
    mem: Memstrata, db: Database, user: str
) -> None:
    """``memstrata mcp --user $'bob\\n'`` wrote memory for a user other than ``bob``."""
    with pytest.raises(errors.InvalidUserIdError, match=r"whitespace|control characters"):
        mem.indexer.index_turn(user, "s1", 0, "hello")
    with pytest.raises(errors.InvalidUserIdError):
        mem.store.upsert_memory_file(user, "memory", "x")
    with pytest.raises(errors.InvalidUserIdError):
        mem.search.search(user, "hello")
    with pytest.raises(errors.InvalidUserIdError):
        asyncio.run(mem.sync.frontend_edit(user, "memory", "x"))
    assert _count(db, ROWS) == 0
    assert _count(db, "SELECT count(*) FROM user_memory") == 0


# -- 10. memory-file names -------------------------------------------------------------------


def test_a_name_http_refuses_is_refused_by_the_library(mem: Memstrata) -> None:
    """``"User"`` and ``"user_md"`` read USER.md while HTTP answered 400 for them: every
    name but the API's and the file's is the error HTTP's 400 ``无效的文件名`` maps."""
    for name in ("bogus", "User", "user_md"):
        with pytest.raises(errors.InvalidFileTypeError, match="invalid file name: ") as refused:
            mem.store.get_memory_file(USER, name)
        mapped = map_exception(refused.value)
        assert mapped is not None and mapped.status_code == 400
    assert mem.store.get_memory_file(USER, "user") is None  # nothing stored yet: None
