"""A database that refuses this server's writes says when to retry, as an unreachable one
does: during a failover the URL reaches the demoted primary (read-only) for the seconds
the switch takes, and clients that retry at once only add load.

Real refusals on the session's server: a hot standby (SQLSTATE 25006, what a replica sees
of a demoted primary) and a role whose grants were revoked (42501: the same code, the same
answer).
"""

from __future__ import annotations

from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import text

from memstrata.api.errors import DATABASE_RETRY_AFTER_S
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.engine import make_engine, make_session_factory
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader
from tests.api.test_database_refuses_writes import FILE, GRANTS, TURN, serving
from tests.db.read_only import hot_standby, login_role

ROLE = "memstrata_retry_after"  # a role of its own, not the other module's


def _writes(client: TestClient, auth: AuthHeader) -> list[Response]:
    return [
        client.put(FILE, headers=auth("alice"), json={"content": "# User\n\nlikes tea\n"}),
        client.post(
            TURN,
            headers=auth("alice"),
            json={"turn_index": 0, "user_message": "hi", "assistant_reply": "hello"},
        ),
    ]


def _says_when_to_retry(answers: list[Response]) -> None:
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert answer.json()["code"] == "database_read_only"
        assert answer.headers.get("retry-after") == str(DATABASE_RETRY_AFTER_S)


def test_a_demoted_primary_answers_writes_with_retry_after(
    settings: Settings, db: Database, pg_url: str, auth: AuthHeader
) -> None:
    del db  # the schema, migrated on the primary, which the standby copies
    with hot_standby(pg_url) as standby:
        engine = make_engine(standby)
        # Without the start-up check, which refuses a standby: as a running process sees
        # the server its URL reaches once that server was demoted.
        mem = Memstrata.open(settings, database=Database(engine, make_session_factory(engine)))
        try:
            with serving(mem) as client:
                answers = _writes(client, auth)
        finally:
            engine.dispose()
    _says_when_to_retry(answers)


def test_revoked_grants_answer_with_the_same_retry_after(
    settings: Settings, db: Database, auth: AuthHeader
) -> None:
    with login_role(db.engine, ROLE, GRANTS) as url:
        mem = Memstrata.open(settings.model_copy(update={"database_url": url}))
        with serving(mem) as client:
            assert client.get(FILE, headers=auth("alice")).status_code == 200
            with db.engine.begin() as conn:
                conn.execute(
                    text(
                        f"REVOKE INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public FROM {ROLE}"
                    )
                )
            answers = _writes(client, auth)
            read = client.get(FILE, headers=auth("alice"))
    _says_when_to_retry(answers)
    assert read.status_code == 200 and "retry-after" not in read.headers


def test_writes_reach_the_new_primary_once_the_old_one_refused_them(
    settings: Settings, db: Database, auth: AuthHeader
) -> None:
    """After a failover the pooled connections stayed on the demoted primary, which refused
    every write for as long as they lived, while a new connection would have reached the
    new primary. Here: sessions opened while the role was read-only, then the role made
    writable again for new sessions only, as a DNS switch makes the new primary."""
    with login_role(db.engine, ROLE, GRANTS) as url:
        mem = Memstrata.open(settings.model_copy(update={"database_url": url}))
        with serving(mem) as client:
            with db.engine.begin() as conn:
                conn.execute(text(f"ALTER ROLE {ROLE} SET default_transaction_read_only = on"))
            mem.db.engine.dispose()  # the pool's next sessions are the read-only server's
            refused = _writes(client, auth)
            with db.engine.begin() as conn:
                conn.execute(text(f"ALTER ROLE {ROLE} RESET default_transaction_read_only"))
            after = [
                client.put(FILE, headers=auth("alice"), json={"content": f"# User\n\n{n}\n"})
                for n in range(3)
            ]
    _says_when_to_retry(refused)
    assert [answer.status_code for answer in after] == [200, 200, 200], after[0].text
