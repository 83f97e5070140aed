"""Ids stored before user-id validation existed: `memstrata user erase` erases them.

`user list` showed such an id — a line feed, a control character, a space at an end — in
its escaped form, and `user erase --user-json` read that form back, then refused the id
with the rule for new ids ("user_id must not contain control characters"), as did every
repository and the sandbox it erases through: the user's data could not be erased. Now an
id the rule refuses is erased when rows are stored under it (``memory.erase``); every
other path refuses it as before, and an id nothing is stored under is refused too.

The rows are real: written for a valid id through the services, then given the old id in
SQL, as a database from before the rule holds them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.db.distribution import PER_USER_TABLES
from memstrata.db.engine import transaction
from memstrata.errors import InvalidUserIdError
from memstrata.memory.kinds import validate_user_id
from memstrata.memory.store import MemoryStore
from memstrata.retrieval.indexer import Indexer
from memstrata.sandbox.dir_names import safe_dir_name
from memstrata.skills.repository import UserSkillConfigRepository
from tests.cli.cli_env import run_cli
from tests.cli.test_user_cli import rows_of

# Ids the rule refuses today, each with rows stored under it.
OLD_IDS = ["bob\n", " carol", "dave\x01x"]


def store_under(db: Database, store: MemoryStore, user_id: str) -> None:
    """Files, a turn, a skill switch and an index state written for a valid id, then
    moved to ``user_id`` in every per-user table."""
    stand_in = "stand-in"
    store.provision_default_files(stand_in)
    Indexer(db.sessions, None).index_turn(stand_in, "s", 0, "the blue door is in Lisbon")
    with transaction(db.sessions) as session:
        UserSkillConfigRepository(session, stand_in).set_enabled("web-search", False)
        for table in PER_USER_TABLES:
            session.execute(
                text(f"UPDATE {table} SET user_id = :old WHERE user_id = :new"),
                {"old": user_id, "new": stand_in},
            )


def held(db: Database, user_id: str) -> int:
    """Rows of ``user_id`` in every per-user table, the index state included."""
    with db.engine.connect() as conn:
        return sum(
            int(
                conn.execute(
                    text(f"SELECT count(*) FROM {table} WHERE user_id = :u"), {"u": user_id}
                ).scalar_one()
            )
            for table in PER_USER_TABLES
        )


@pytest.fixture
def old_users(db: Database, store: MemoryStore, boxes: Path) -> None:
    for user_id in OLD_IDS:
        store_under(db, store, user_id)
        box = boxes / safe_dir_name(user_id)
        box.mkdir(parents=True)
        (box / "USER.md").write_text("from before")
    store.provision_default_files("alice")


@pytest.mark.parametrize("user_id", OLD_IDS)
def test_an_id_stored_before_the_rule_is_erased_by_the_form_list_shows(
    db: Database, old_users: None, boxes: Path, user_id: str
) -> None:
    code, out, _ = run_cli("user", "list", "--json")
    assert code == 0 and user_id in [u["user_id"] for u in json.loads(out)]
    assert rows_of(db, user_id) == 5  # three files, one turn, one skill switch

    code, out, err = run_cli("user", "erase", "--user-json", json.dumps(user_id), "--yes")

    assert code == 0, err
    assert out.splitlines()[0] == f"erased {user_id!r}"
    assert f"  {'user_skill_configs':24s} 1 row(s) deleted" in out
    assert rows_of(db, user_id) == 0
    assert not (boxes / safe_dir_name(user_id)).exists()
    assert rows_of(db, "alice") == 3  # nobody else's
    assert all(rows_of(db, other) == 5 for other in OLD_IDS if other != user_id)


def test_erasing_it_again_finds_nothing_as_for_any_id(db: Database, old_users: None) -> None:
    """The index state row (counters only) outlives the erasure, as for a valid id, and
    tells the second erase the id was stored: nothing left to delete, not a refusal."""
    assert run_cli("user", "erase", "--user-json", '"bob\\n"', "--yes")[0] == 0
    assert held(db, "bob\n") == 1  # memory_index_state: the bumped generation
    code, out, err = run_cli("user", "erase", "--user-json", '"bob\\n"', "--yes")
    assert code == 0, err
    assert out.splitlines()[0] == "nothing of 'bob\\n' was stored"


def test_without_yes_it_asks_only_once_it_knows_the_id_is_stored(
    db: Database, old_users: None
) -> None:
    code, out, err = run_cli("user", "erase", "--user-json", '"bob\\n"')
    assert (code, out) == (2, "")
    assert err.strip() == "error: not erasing 'bob\\n': this cannot be undone; add --yes to confirm"
    assert rows_of(db, "bob\n") == 5


@pytest.mark.parametrize("user_id", ["erin\n", " frank", "a\tb"])
def test_an_id_the_rule_refuses_and_nothing_is_stored_under_stays_refused(
    db: Database, old_users: None, user_id: str
) -> None:
    code, out, err = run_cli("user", "erase", "--user-json", json.dumps(user_id), "--yes")
    assert (code, out) == (1, "")
    assert "nothing is stored under that id" in err and len(err.strip().splitlines()) == 1
    assert all(rows_of(db, old) == 5 for old in OLD_IDS)


def test_no_other_path_takes_the_stored_id(db: Database, old_users: None) -> None:
    """Only the erasure looks the id up: a search, a token and the rule itself refuse it."""
    user_id = "dave\x01x"
    for command in (["search", "blue door"], ["token"], ["conflicts", "list"]):
        code, out, err = run_cli(*command, "--user-json", json.dumps(user_id))
        assert (code, out) == (1, ""), command
        assert "user_id must not contain control characters" in err, command
    with pytest.raises(InvalidUserIdError, match="control characters"):
        validate_user_id(user_id)
    with pytest.raises(InvalidUserIdError, match="control characters"):
        Indexer(db.sessions, None).index_turn(user_id, "s", 1, "a new turn")
    assert rows_of(db, user_id) == 5


def test_the_erasure_marks_only_an_id_it_found_stored(db: Database, old_users: None) -> None:
    from memstrata.memory.erase import erasable_user_id
    from memstrata.memory.kinds import StoredUserId

    assert type(erasable_user_id(db.sessions, "alice")) is str  # valid: as it is
    assert isinstance(erasable_user_id(db.sessions, "bob\n"), StoredUserId)
    # Never storable in the user_id columns: refused by the rule, not looked for.
    for never in ("a\x00b", "a\ud800b", "x" * 101):
        with pytest.raises(InvalidUserIdError) as refused:
            erasable_user_id(db.sessions, never)
        assert "nothing is stored" not in str(refused.value)
