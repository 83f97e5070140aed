"""A PUT whose text the file already holds changes nothing.

On the current version (or none) it is 200 with the stored version and ``unchanged``: no
version bump, no embedding (versions change with the content only). On an older version
it is spec §3's 409 by default, whatever the text: the body adds ``same_content: true`` and
its message says the file holds this text already, so a client retrying after a lost
answer knows its write landed. ``MEMSTRATA_SAME_TEXT_STALE_VERSION=unchanged`` (opt-in)
answers that retry 200 ``unchanged`` instead. One rule for every writer
(``memstrata.memory.same_text.unchanged_write``). Real app, real PostgreSQL, real sandbox
directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from memstrata.api import create_app
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.models import UserMemory
from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from memstrata.sandbox.dir_names import safe_dir_name
from tests.api.auth import AuthHeader

MEMORY = "/api/config/agent-files/memory"
TEXT = "# MEMORY.md\n- Likes green tea\n"


class CountingIndexer:
    """The store's real indexer, counting the files it stages (chunks and embeds)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.staged = 0

    def stage_memory_file(
        self, user_id: str, kind: FileKind, content: str, *, embed: bool = True
    ) -> Any:
        self.staged += 1
        return self.inner.stage_memory_file(user_id, kind, content, embed=embed)


def _updated_at(mem: Memstrata) -> object:
    with mem.db.sessions() as session:
        return session.scalar(
            select(UserMemory.updated_at).where(
                UserMemory.user_id == "alice", UserMemory.file_type == "memory_md"
            )
        )


def _put(client: TestClient, auth: AuthHeader, version: str | None, **body: Any) -> Any:
    headers = auth() if version is None else {**auth(), "If-Match": version}
    return client.put(MEMORY, headers=headers, json={"content": TEXT, **body})


def _same_content_conflict(answer: Any, expected: int, current: int) -> None:
    """The default's answer to a stale write of the stored text: spec §3's 409, saying so."""
    assert answer.status_code == 409, answer.text
    assert answer.json() == {
        "code": "version_conflict",
        "detail": SAME_TEXT_CONFLICT.format(expected=expected, current=current),
        "message": SAME_TEXT_CONFLICT.format(expected=expected, current=current),
        "expected_version": expected,
        "current_version": current,
        "same_content": True,
    }
    assert "etag" not in answer.headers


SAME_TEXT_CONFLICT = (
    "version conflict on MEMORY.md: expected version {expected}, found version {current}, "
    "which holds this text already (nothing to write: a write of it landed, perhaps one "
    "whose answer was lost); to change it further, read it again and apply your change to "
    "version {current}"
)


@pytest.fixture
def opted(db: Database, settings: Settings) -> Iterator[Memstrata]:
    """A runtime run with ``MEMSTRATA_SAME_TEXT_STALE_VERSION=unchanged``."""
    mem = Memstrata.open(
        settings.model_copy(update={"same_text_stale_version": "unchanged"}), database=db
    )
    assert mem.store.same_text_stale_version == "unchanged"
    yield mem
    mem.close()


@pytest.fixture
def unchanged(opted: Memstrata) -> Iterator[TestClient]:
    """A client of a server run with ``MEMSTRATA_SAME_TEXT_STALE_VERSION=unchanged``."""
    with TestClient(create_app(memstrata=opted), raise_server_exceptions=False) as client:
        yield client


@pytest.mark.parametrize("how", ["if-match", "expected_version"])
def test_a_retry_of_a_put_that_landed_is_409_saying_the_file_holds_its_text(
    client: TestClient, auth: AuthHeader, mem: Memstrata, how: str
) -> None:
    etag = client.get(MEMORY, headers=auth()).headers["etag"]  # "1"
    first = _put(client, auth, etag)
    assert (first.status_code, first.json()["version"]) == (200, 2)
    stamp = _updated_at(mem)
    # The answer was lost; the client sends the same request again.
    retry = (
        _put(client, auth, etag)
        if how == "if-match"
        else _put(client, auth, None, expected_version=1)
    )
    _same_content_conflict(retry, 1, 2)
    assert _updated_at(mem) == stamp  # nothing written


def test_a_put_of_the_stored_text_on_the_current_version_is_200_unchanged(
    client: TestClient, auth: AuthHeader, mem: Memstrata
) -> None:
    """Not stale, so no conflict by any rule: the same request twice on version 2."""
    etag = client.get(MEMORY, headers=auth()).headers["etag"]
    assert _put(client, auth, etag).json()["version"] == 2
    stamp = _updated_at(mem)
    again = _put(client, auth, '"2"')
    assert (again.status_code, again.json()["version"]) == (200, 2), again.text
    assert again.json()["unchanged"] is True
    assert again.headers["etag"] == '"2"'
    assert _updated_at(mem) == stamp


@pytest.mark.parametrize("how", ["if-match", "expected_version"])
def test_with_the_unchanged_rule_a_retry_of_a_put_that_landed_is_200(
    unchanged: TestClient, auth: AuthHeader, mem: Memstrata, how: str
) -> None:
    client = unchanged
    etag = client.get(MEMORY, headers=auth()).headers["etag"]  # "1"
    first = _put(client, auth, etag)
    assert (first.status_code, first.json()["version"]) == (200, 2)
    stamp = _updated_at(mem)
    # The answer was lost; the client sends the same request again.
    retry = (
        _put(client, auth, etag)
        if how == "if-match"
        else _put(client, auth, None, expected_version=1)
    )
    assert retry.status_code == 200, retry.text
    # Spec §3's body, and ``unchanged`` (only then): the page says nothing was written.
    assert retry.json() == {
        "name": "memory",
        "file_type": "memory_md",
        "version": 2,
        "message": "ok",
        "unchanged": True,
    }
    assert list(first.json()) == ["name", "file_type", "version", "message"]
    assert retry.headers["etag"] == '"2"'
    assert _updated_at(mem) == stamp  # nothing written


@pytest.mark.parametrize("rule", ["conflict", "unchanged"])
def test_a_retry_after_another_process_stored_the_same_text(
    client: TestClient, unchanged: TestClient, auth: AuthHeader, mem: Memstrata, rule: str
) -> None:
    """This process last saw version 1 (its claims let the write through to the DB
    check); the text landed as version 2 elsewhere, e.g. through another replica."""
    server = client if rule == "conflict" else unchanged
    etag = server.get(MEMORY, headers=auth()).headers["etag"]
    mem.store.upsert_memory_file("alice", FileKind.MEMORY, TEXT, 1)
    retry = _put(server, auth, etag)
    if rule == "conflict":
        _same_content_conflict(retry, 1, 2)
    else:
        assert (retry.status_code, retry.json()["version"]) == (200, 2), retry.text


def test_a_stale_put_with_other_text_is_still_409(client: TestClient, auth: AuthHeader) -> None:
    etag = client.get(MEMORY, headers=auth()).headers["etag"]
    assert _put(client, auth, etag).status_code == 200
    other = client.put(MEMORY, headers={**auth(), "If-Match": etag}, json={"content": "other"})
    assert other.status_code == 409
    assert (other.json()["expected_version"], other.json()["current_version"]) == (1, 2)
    assert "same_content" not in other.json()  # only when true: spec §4's body otherwise
    assert client.get(MEMORY, headers=auth()).json()["content"] == TEXT


def test_a_same_content_put_bumps_no_version_and_embeds_nothing(
    client: TestClient, auth: AuthHeader, mem: Memstrata
) -> None:
    counting = CountingIndexer(mem.store.indexer)
    mem.store.indexer = counting
    assert _put(client, auth, None).json()["version"] == 1
    assert counting.staged == 1
    stamp = _updated_at(mem)
    for _ in range(2):
        again = _put(client, auth, None)
        assert (again.status_code, again.json()["version"]) == (200, 1), again.text
    assert counting.staged == 1
    assert _updated_at(mem) == stamp


def test_a_same_content_put_still_brings_the_sandbox_up_to_the_db(
    client: TestClient, auth: AuthHeader, settings: Settings
) -> None:
    """The follow-on effects still run: a retry heals a mirror the first PUT left behind."""
    assert _put(client, auth, None).status_code == 200
    copy = settings.resolved_sandbox_root / safe_dir_name("alice") / "MEMORY.md"
    assert copy.read_text() == TEXT
    copy.unlink()  # the sandbox lost its copy (a failed push, a sandbox restored from a backup)
    again = _put(client, auth, None)
    assert (again.status_code, again.json()["version"]) == (200, 1), again.text
    assert copy.read_text() == TEXT


class RacingIndexer(CountingIndexer):
    """Stores ``text`` as another process would while the PUT embeds (once): the PUT's
    conditional update then finds a newer version, which holds the PUT's own text."""

    def __init__(self, inner: Any, mem: Memstrata, text: str) -> None:
        super().__init__(inner)
        self.mem, self.text, self.raced = mem, text, False

    def stage_memory_file(
        self, user_id: str, kind: FileKind, content: str, *, embed: bool = True
    ) -> Any:
        staged = super().stage_memory_file(user_id, kind, content, embed=embed)
        if not self.raced:
            self.raced = True
            self.mem.store.upsert_memory_file(user_id, kind, self.text)  # embeds again: 2
        return staged


@pytest.mark.parametrize("rule", ["conflict", "unchanged"])
def test_a_put_that_loses_the_race_to_the_same_text(
    client: TestClient,
    unchanged: TestClient,
    opted: Memstrata,
    auth: AuthHeader,
    mem: Memstrata,
    rule: str,
) -> None:
    """Two tries of one PUT at once, on two replicas: the one whose commit comes second
    finds the version the first stored, holding its text: a 409 saying so by default, the
    stored version with the unchanged rule."""
    server = client if rule == "conflict" else unchanged
    etag = server.get(MEMORY, headers=auth()).headers["etag"]
    runtime = mem if rule == "conflict" else opted  # the server's
    racing = RacingIndexer(runtime.store.indexer, runtime, TEXT)
    runtime.store.indexer = racing
    answer = _put(server, auth, etag)
    if rule == "conflict":
        _same_content_conflict(answer, 1, 2)
    else:
        assert (answer.status_code, answer.json()["version"]) == (200, 2), answer.text
        assert answer.json()["unchanged"] is True
    assert racing.raced and racing.staged == 2
    stored = mem.store.get_memory_file("alice", FileKind.MEMORY)
    assert stored is not None and (stored.content, stored.version) == (TEXT, 2)
