"""`memstrata user erase` and `memstrata user list` through Typer's runner, on the test
database and a real sandbox root."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.memory.store import MemoryStore
from memstrata.retrieval.indexer import Indexer
from memstrata.skills.repository import UserSkillConfigRepository
from tests.cli.cli_env import run_cli


def rows_of(db: Database, user_id: str) -> int:
    with db.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT (SELECT count(*) FROM user_memory WHERE user_id = :u) "
                    "+ (SELECT count(*) FROM memory_embeddings WHERE user_id = :u) "
                    "+ (SELECT count(*) FROM user_skill_configs WHERE user_id = :u)"
                ),
                {"u": user_id},
            ).scalar_one()
        )


@pytest.fixture
def users(db: Database, store: MemoryStore, boxes: Path) -> None:
    """alice: three files, two turns, a skill switch and a sandbox; bob: three files."""
    for user_id in ("alice", "bob"):
        store.provision_default_files(user_id)
    Indexer(db.sessions, None).index_turn("alice", "s", 0, "the blue door is in Lisbon")
    Indexer(db.sessions, None).index_turn("alice", "s", 1, "and the red one in Porto")
    with transaction(db.sessions) as session:
        UserSkillConfigRepository(session, "alice").set_enabled("web-search", False)
    (boxes / "alice" / "sessions" / "s").mkdir(parents=True)
    (boxes / "alice" / "USER.md").write_text("alice")


def test_erase_refuses_without_yes_when_stdin_is_no_terminal(
    db: Database, users: None, boxes: Path
) -> None:
    code, out, err = run_cli("user", "erase", "--user", "alice")
    assert code == 2 and out == ""
    assert err.strip() == "error: not erasing 'alice': this cannot be undone; add --yes to confirm"
    assert rows_of(db, "alice") == 6 and (boxes / "alice" / "USER.md").exists()


def test_erase_prints_the_counts_and_leaves_other_users(
    db: Database, users: None, boxes: Path
) -> None:
    code, out, err = run_cli("user", "erase", "--user", "alice", "--yes")
    assert code == 0, err
    assert out.splitlines() == [
        "erased 'alice'",
        "  user_memory              3 row(s) deleted",
        "  memory_embeddings        2 row(s) deleted",
        "  memory_index_snapshots   0 row(s) deleted",
        "  user_skill_configs       1 row(s) deleted",
        "  memory_index_state       kept, counters only (generation 3)",
        "  sandbox                  removed",
    ]
    assert rows_of(db, "alice") == 0 and not (boxes / "alice").exists()
    assert rows_of(db, "bob") == 3

    code, out, err = run_cli("user", "erase", "--user", "alice", "--yes", "--json")
    assert code == 0, err
    assert json.loads(out) == {
        "user_id": "alice",
        "deleted": {
            "user_memory": 0,
            "memory_embeddings": 0,
            "memory_index_snapshots": 0,
            "user_skill_configs": 0,
        },
        "index_generation": 3,
        "sandbox": "absent",
    }


def test_erase_of_a_bad_user_id_is_one_line(boxes: Path, db: Database) -> None:
    code, out, err = run_cli("user", "erase", "--user", "x" * 101, "--yes")
    assert code == 1 and out == ""
    assert err.strip() == "error: user_id is longer than 100 characters"


def test_list_shows_every_user_with_counts(db: Database, users: None) -> None:
    code, out, err = run_cli("user", "list")
    assert code == 0, err
    assert out.splitlines() == [
        "user   files   rows  skills",
        "alice      3      2       1",
        "bob        3      0       0",
    ]
    code, out, err = run_cli("user", "list", "--json")
    assert code == 0, err
    assert json.loads(out) == [
        {"user_id": "alice", "files": 3, "rows": 2, "skills": 1},
        {"user_id": "bob", "files": 3, "rows": 0, "skills": 0},
    ]
    run_cli("user", "erase", "--user", "alice", "--yes")
    code, out, _ = run_cli("user", "list")
    assert out.splitlines() == ["user  files   rows  skills", "bob       3      0       0"]
