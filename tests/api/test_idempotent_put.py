"""A PUT whose text the file already holds changes nothing and is answered 200.

Spec §3's optimistic lock refuses a write based on another version (409) so that no edit
is lost; a write whose text is the stored one loses nothing, whatever version it names:
the client gets what it asked for. So a PUT retried after its answer was lost is 200 with
the stored version, not a 409 that sends the user to merge a text with itself, and a
same-content PUT bumps no version and embeds nothing (versions change with the content
only). MCP's ``memory_write`` answers "No change" by the same rule
(``memstrata.memory.store.holds_text``). Real app, real PostgreSQL, real sandbox directory.
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from memstrata.config import Settings
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


@pytest.mark.parametrize("how", ["if-match", "expected_version"])
def test_a_retry_of_a_put_that_landed_is_200_with_the_stored_version(
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


def test_a_retry_after_another_process_stored_the_same_text_is_200(
    client: TestClient, auth: AuthHeader, mem: Memstrata
) -> None:
    """This process last saw version 1 (its claims let the write through to the DB
    check); the text landed as version 2 elsewhere, e.g. through another replica."""
    etag = client.get(MEMORY, headers=auth()).headers["etag"]
    mem.store.upsert_memory_file("alice", FileKind.MEMORY, TEXT, 1)
    retry = _put(client, auth, etag)
    assert (retry.status_code, retry.json()["version"]) == (200, 2), retry.text


def test_a_stale_put_with_other_text_is_still_409(client: TestClient, auth: AuthHeader) -> None:
    etag = client.get(MEMORY, headers=auth()).headers["etag"]
    assert _put(client, auth, etag).status_code == 200
    other = client.put(MEMORY, headers={**auth(), "If-Match": etag}, json={"content": "other"})
    assert other.status_code == 409
    assert (other.json()["expected_version"], other.json()["current_version"]) == (1, 2)
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


def test_a_put_that_loses_the_race_to_the_same_text_is_200(
    client: TestClient, auth: AuthHeader, mem: Memstrata
) -> None:
    """Two tries of one PUT at once, on two replicas: the one whose commit comes second
    is answered with the version the first stored, not a 409."""
    etag = client.get(MEMORY, headers=auth()).headers["etag"]
    racing = RacingIndexer(mem.store.indexer, mem, TEXT)
    mem.store.indexer = racing
    answer = _put(client, auth, etag)
    assert (answer.status_code, answer.json()["version"]) == (200, 2), answer.text
    assert answer.json()["unchanged"] is True
    assert racing.raced and racing.staged == 2
    stored = mem.store.get_memory_file("alice", FileKind.MEMORY)
    assert stored is not None and (stored.content, stored.version) == (TEXT, 2)
