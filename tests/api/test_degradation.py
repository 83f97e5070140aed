"""Spec §5 over HTTP: a broken sandbox or embedding API never fails a memory-file write."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memstrata.api import create_app
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader

FILES = "/api/config/agent-files/{}"


@pytest.fixture
def open_client(settings: Settings, db: Database) -> Iterator[Callable[..., TestClient]]:
    opened: list[tuple[Memstrata, TestClient]] = []

    def factory(**overrides: Any) -> TestClient:
        runtime = Memstrata.open(settings.model_copy(update=overrides), database=db)
        client = TestClient(create_app(memstrata=runtime), raise_server_exceptions=False)
        opened.append((runtime, client))
        return client

    yield factory
    for runtime, client in opened:
        client.close()
        runtime.close()


def test_unwritable_sandbox(
    open_client: Callable[..., TestClient], auth: AuthHeader, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the sandbox root should be")
    client = open_client(sandbox_root=blocker)
    first = client.get(FILES.format("memory"), headers=auth())
    assert (first.status_code, first.json()["version"]) == (200, 1)
    response = client.put(FILES.format("memory"), headers=auth(), json={"content": "kept"})
    assert response.json() == {
        "name": "memory",
        "file_type": "memory_md",
        "version": 2,
        "message": "ok",
    }
    assert client.get(FILES.format("memory"), headers=auth()).json()["content"] == "kept"


def test_unreachable_embedding_api(
    open_client: Callable[..., TestClient], auth: AuthHeader
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = open_client(
        embedding_base_url=f"http://apiuser:TopSecretPw@127.0.0.1:{port}/v1?key=AlsoSecret",
        embedding_model="nobody",
        embedding_max_retries=0,
        embedding_timeout_s=1.0,
    )
    response = client.put(FILES.format("user"), headers=auth(), json={"content": "团子是一只猫"})
    assert (response.status_code, response.json()["version"]) == (200, 1)
    search = client.post("/api/memory/search", headers=auth(), json={"query": "团子"})
    assert search.status_code == 200
    body = search.json()
    assert body["mode"] == "bm25"
    assert [h["text"] for h in body["hits"]] == ["团子是一只猫"]
    assert body["warnings"][0] == (
        "query embedding failed, searched with BM25 only: "
        "the embedding service is unreachable or did not answer in time"
    )
    # Where the embedding API lives, and its credentials, are not the caller's business.
    assert "127.0.0.1" not in search.text and "Secret" not in search.text
