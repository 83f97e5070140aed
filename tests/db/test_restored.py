"""`memstrata db restored`: after a real ``pg_dump`` / ``pg_restore``, a version a client
read before the restore no longer matches (docs/DEPLOY.md, "Backup and restore").

Found by a drill: MEMORY.md at version 2 when the dump ran, edited to 3 afterwards (a
client kept ETag "3"), the dump restored (version 2 again), edited after the restore (3
again, other text): the client's ``If-Match: "3"`` was a 200 and the edit made after the
restore was gone, with no conflict. The command lifts every version by 1,000,000 once,
before the replicas start; a lift that cannot fit, a database that holds nothing restored
and a role that may not set the id sequence are refused, nothing changed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine

from memstrata.api import create_app
from memstrata.db.integers import MAX_INT
from memstrata.db.restored import RESTORE_STEP
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader

from .read_only import login_role
from .restore_drill import Drill, drill, run_restored  # noqa: F401  (a fixture)

FILE = "/api/config/agent-files/memory"


@contextmanager
def replica(d: Drill) -> Iterator[TestClient]:
    """`memstrata serve` on the drill's database (BM25 only), started and stopped."""
    mem = Memstrata.open(d.settings, embedder=None)
    try:
        with TestClient(create_app(memstrata=mem), raise_server_exceptions=False) as client:
            yield client
    finally:
        mem.close()


def put(client: TestClient, auth: AuthHeader, content: str, if_match: str) -> tuple[int, dict]:
    answer = client.put(FILE, json={"content": content}, headers={**auth(), "If-Match": if_match})
    return answer.status_code, answer.json()


def test_a_version_read_before_the_restore_is_a_conflict_after_it(
    drill: Drill,  # noqa: F811
    auth: AuthHeader,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    with replica(drill) as client:
        assert client.get(FILE, headers=auth()).headers["ETag"] == '"1"'
        assert put(client, auth, "- backed up\n", '"1"')[0] == 200
    drill.dump()  # MEMORY.md at version 2
    with replica(drill) as client:
        status, body = put(client, auth, "- after the backup\n", '"2"')
        assert (status, body["version"]) == (200, 3)
    held = '"3"'  # a web page, an agent or an MCP client read it

    drill.restore()
    assert drill.sql("SELECT version FROM user_memory WHERE file_type = 'memory_md'") == [(2,)]
    summary = drill.restored(monkeypatch, tmp_path)

    with replica(drill) as client:
        current = client.get(FILE, headers=auth())
        assert current.headers["ETag"] == f'"{2 + RESTORE_STEP}"'
        status, body = put(client, auth, "- after the restore\n", current.headers["ETag"])
        assert (status, body["version"]) == (200, 3 + RESTORE_STEP)

        status, body = put(client, auth, "- from the stale client\n", held)

        assert status == 409, body
        assert (body["code"], body["expected_version"]) == ("version_conflict", 3)
        assert body["current_version"] == 3 + RESTORE_STEP
        assert client.get(FILE, headers=auth()).json()["content"] == "- after the restore\n"
    assert summary == {
        "step": RESTORE_STEP,
        "files": 3,  # SOUL.md, USER.md, MEMORY.md of the one user
        "users": 1,
        "sandbox_files": 3,  # each pushed to the user's own sandbox when provisioned
        "sandboxes": 1,
        "index_states": 1,
        "next_embedding_id": summary["next_embedding_id"],
        "highest_version": 2 + RESTORE_STEP,
    }
    assert summary["next_embedding_id"] > RESTORE_STEP


def test_run_twice_it_lifts_twice(
    drill: Drill,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Harmless: every version stays above what any client held; the notes with them."""
    drill.sql("INSERT INTO user_memory (user_id, file_type, content) VALUES ('u', 'user_md', 'x')")
    drill.sql(
        "INSERT INTO sandbox_synced (user_id, root, sandbox, file_type, version) "
        "VALUES ('u', 'r', '', 'user_md', 1)"
    )
    first = drill.restored(monkeypatch, tmp_path)
    second = drill.restored(monkeypatch, tmp_path)

    assert (first["highest_version"], second["highest_version"]) == (
        1 + RESTORE_STEP,
        1 + 2 * RESTORE_STEP,
    )
    assert second["next_embedding_id"] == first["next_embedding_id"] + RESTORE_STEP
    assert drill.sql("SELECT version FROM sandbox_synced") == [(1 + 2 * RESTORE_STEP,)]


def test_a_lift_past_the_integer_bound_is_refused_and_changes_nothing(
    drill: Drill,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    near = MAX_INT - RESTORE_STEP + 1
    drill.sql(
        "INSERT INTO user_memory (user_id, file_type, content, version) VALUES "
        "('u', 'user_md', 'x', 5), ('v', 'memory_md', 'y', :near)",
        near=near,
    )

    code, out, err = run_restored(monkeypatch, tmp_path, drill.url)

    assert (code, out) == (1, "")
    assert err.startswith(
        f"error: a lift by {RESTORE_STEP} would take a memory file's version past {MAX_INT} "
        f"(the highest is {near}) on "
    ), err
    assert "nothing was changed" in err and err.count("\n") == 1
    assert drill.sql("SELECT version FROM user_memory ORDER BY user_id") == [(5,), (near,)]


def test_a_database_with_no_schema_is_refused_with_exit_status_2(
    drill: Drill,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Nothing restored there (a restore into another database, or one that failed)."""
    drill.sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")

    code, out, err = run_restored(monkeypatch, tmp_path, drill.url)

    assert (code, out) == (2, "")
    assert "has no memstrata schema: nothing restored to lift; restore the backup first" in err


def test_a_role_that_may_not_set_the_id_sequence_is_refused(
    drill: Drill,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """The replicas' role (docs/DEPLOY.md section 1: table rights, USAGE on sequences)."""
    drill.sql("INSERT INTO user_memory (user_id, file_type, content) VALUES ('u', 'user_md', 'x')")
    owner = create_engine(drill.url)
    grants = (
        "SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public",
        "USAGE ON ALL SEQUENCES IN SCHEMA public",
    )
    try:
        with login_role(owner, "ms_replica", grants) as replica_url:
            code, out, err = run_restored(monkeypatch, tmp_path, replica_url)
    finally:
        owner.dispose()

    assert (code, out) == (1, "")
    assert err.startswith("error: role ms_replica may not set the sequence of ")
    assert "with MEMSTRATA_DATABASE_URL set to the URL of the role that owns the tables" in err
    assert drill.sql("SELECT version FROM user_memory") == [(1,)]
